// Wiring shared by the CLI's subcommands: config -> tokenizer, data, model, objective; checkpoint -> model.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "dataset/tokenizer.h"
#include "dataset/window_loader.h"
#include "dataset/window_mixture.h"
#include "models/language_model.h"
#include "objectives/objective.h"

namespace inkstone::cli {

// --run-dir, else run.run_dir, else runs/<run.name>.
std::filesystem::path resolve_run_dir(const Config& config, const std::string& cli_run_dir);

struct RunContext {
  torch::Device device = torch::kCPU;
  std::shared_ptr<const Tokenizer> tokenizer;
};
// Threads, BLAS check, seed, device and tokenizer for a config: `tokenizer` where the run's comes from elsewhere
// (an RL policy's checkpoint), else load_run_tokenizer's.
RunContext prepare_run(const Config& config, std::shared_ptr<const Tokenizer> tokenizer = nullptr);
// The run's tokenizer alone: data.tokenizer, else the data folder's.
std::shared_ptr<const Tokenizer> load_run_tokenizer(const Config& config);

// A data folder of conversations (`data prepare --format chat`) trains only where its prompts render as this run
// renders them ([chat] equal to what the folder records), packed with documents kept apart, and under a
// bidirectional objective with one trained response per conversation: InputError naming the key otherwise.
void check_conversation_settings(const Config& config, const ObjectiveNeeds& needs, const DataFolder& folder,
                                 const Manifest& manifest);

// The training windows (one folder's, or a WindowMixture of data.mixture's) and every folder's splits.
struct TrainingData {
  std::shared_ptr<const TrainWindows> train;
  std::vector<MixtureSource> sources;
};
// `rank`: this process's rank in a data-parallel run (which rows of each global batch it reads). Every folder must
// be prepared with `tokenizer`; a mixture's folders must have distinct names (they label the validation figures).
TrainingData open_training_data(const Config& config, const Tokenizer& tokenizer, const ObjectiveNeeds& needs,
                                int64_t rank = 0);

// Refuses (InputError) a model whose training state cannot fit in the memory of a CPU `device`.
LanguageModel build_model_for(const Config& config, const Tokenizer& tokenizer, const torch::Device& device);
void print_run_header(const Config& config, LanguageModel& model, const std::filesystem::path& run_dir,
                      torch::Device device);

// state.json records the objective that trained the weights; a config.toml naming another would sample, score or
// adopt them as what they are not (uniform diffusion on AR weights): InputError naming the folder.
void check_trained_objective(const CheckpointData& checkpoint, const Config& config);

// A trained model restored from a checkpoint folder or a run folder (its newest checkpoint).
struct TrainedModel {
  Config config;
  LanguageModel model{nullptr};
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<Objective> objective;
  int64_t step = 0;
  torch::Device device = torch::kCPU;
};
TrainedModel load_trained_model(const std::string& checkpoint_or_run_dir, const std::string& device);

}  // namespace inkstone::cli
