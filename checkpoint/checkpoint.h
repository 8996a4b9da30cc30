// Training checkpoints: one folder per step, written so that a crash at any moment leaves every earlier
// checkpoint loadable and never a partial folder under a final name.
//
//   RUN_DIR/checkpoints/step_000123/
//     model.safetensors      weights by parameter name
//     optimizer.safetensors  AdamW state by parameter name (checkpoint/optimizer_state.h); a ZeRO run's is in
//                            one file per rank instead, optimizer.rank00001-of-00004.safetensors, ...
//     config.toml            the resolved config
//     tokenizer.json         the tokenizer document
//     objective.safetensors  an objective's own trainable weights (FlowRL's log Z head); only when it has some
//     state.json             the trainer's state (step, tokens seen, data position, RNG (checkpoint/rng_state.h),
//                            schedule and optimizer hyperparameters, objective extras) plus the size and xxh64
//                            of every other file, written last, so loading catches a truncated or corrupt piece
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"

namespace inkstone {

// save_checkpoint refuses a tensor holding NaN or inf: a runtime failure (exit 1), named apart so that callers and
// tests can tell it from others.
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CheckpointData {
  int64_t step = 0;
  nlohmann::json state = nlohmann::json::object();  // the trainer's own keys; "step" and "files" are reserved
  NamedTensors model;
  std::vector<PlannedTensor> model_planned;  // instead of `model`: produced one at a time while writing (import)
  NamedTensors optimizer;
  NamedTensors objective;  // empty for objectives without weights of their own
  std::string config_toml;
  nlohmann::json tokenizer;
  std::string state_origin = "state.json";  // load_checkpoint: the state.json path, for errors
  // A sharded optimizer state (ZeRO, train/zero_sharding.h): the number of shard files, one per rank, instead of
  // `optimizer`. save_checkpoint collects them from where the ranks staged them (stage_optimizer_shard);
  // load_checkpoint verifies them and leaves the reading to read_optimizer_shard.
  int64_t optimizer_shards = 0;
  std::filesystem::path folder;  // load_checkpoint: the folder it read
};

std::string optimizer_shard_file(int64_t rank, int64_t shards);
// Writes rank `rank`'s shard of step `step`'s optimizer state atomically into RUN_DIR/checkpoints/
// .step_<step>.shards/, where save_checkpoint of that step (on rank 0, after every rank has staged) collects it.
void stage_optimizer_shard(const std::filesystem::path& run_dir, int64_t step, int64_t rank, int64_t shards,
                           const NamedTensors& state);
NamedTensors read_optimizer_shard(const CheckpointData& checkpoint, int64_t rank);
// Reads every shard into `optimizer`: an ordinary checkpoint, which resumes on any number of ranks.
void consolidate_optimizer_shards(CheckpointData& checkpoint);

// A trainer's own key of the checkpoint state; a missing key (without a fallback) or a value of another type is
// an InputError naming state.json and the key. Integers must not be negative.
int64_t state_count(const CheckpointData& checkpoint, const std::string& key);
double state_number(const CheckpointData& checkpoint, const std::string& key, double fallback);

// Called after each file is complete inside the temporary folder, with that file's name. Tests use it to
// simulate a crash mid-write; the trainer passes nothing.
using CheckpointFileHook = std::function<void(const std::string& file_name)>;

// Writes RUN_DIR/checkpoints/step_<step>/ through a temporary `.step_<step>.tmp-<pid>` folder beside it, every
// file fsync'ed, then renamed into place and the parent folder fsync'ed. An existing folder for the same step is
// replaced. Afterwards keeps the `keep_last` highest steps (keep_last <= 0 keeps all), never removing the one just
// written. On an exception the temporary folder is removed. Returns the checkpoint folder.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, const CheckpointData& data,
                                      int64_t keep_last, const CheckpointFileHook& after_file = nullptr);

// The highest-step complete checkpoint folder under RUN_DIR/checkpoints, or nullopt. Temporary folders are
// ignored, and those whose writing process has died are removed.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);

// What load_checkpoint reads: everything (--resume); the model (its weights, config and tokenizer: sample, eval,
// an initial checkpoint's weights); or only the description (state.json, config.toml, tokenizer.json: adopting an
// architecture, which needs no weights). Only the files read are verified.
enum class CheckpointParts { everything, model, description };

// Loads a checkpoint folder, or the latest checkpoint of a run folder (`folder` says which it read), validating
// every file it reads; a missing, truncated or corrupt piece is a one-line InputError naming the file.
CheckpointData load_checkpoint(const std::filesystem::path& dir_or_run_dir,
                               CheckpointParts parts = CheckpointParts::everything);

}  // namespace inkstone
