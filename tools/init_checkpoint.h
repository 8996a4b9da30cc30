// Runs that start from another run's checkpoint (or a model brought in by `inkstone import hf`), with a fresh
// optimizer and schedule. train.init_checkpoint (docs/training.md, "Starting from a checkpoint"): a run on token
// windows, for continued pretraining, fine-tuning and AR -> diffusion adaptation (a checkpoint trained causally and
// a diffusion objective, which attends both ways). rl.init_checkpoint (docs/rl.md): the policy an RL run trains.
// Adoption reads only the checkpoint's description and rewrites the run's config once, before the run is set up;
// the weights are loaded into the model built from that config.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "dataset/tokenizer.h"
#include "models/language_model.h"

namespace inkstone::cli {

// [model] keys a run may set differently from its initial checkpoint: the context and RoPE scaling (context
// extension), initialisation (it only shapes weights the checkpoint lacks), the MoE balancing coefficients, and
// the two that add weights: model.time_conditioning (adaLN-Zero, initialised as configured) and
// model.tie_embeddings = false (an output head of its own, starting as a copy of the tied embedding).
bool may_differ_from_initial_checkpoint(const std::string& model_key);

struct InitialCheckpoint {
  std::string key;            // the config key that named it: train.init_checkpoint or rl.init_checkpoint
  CheckpointData checkpoint;  // its description (CheckpointParts::description): no weights
  Config config;              // the checkpoint's own
  std::shared_ptr<const Tokenizer> tokenizer;
  std::vector<std::string> notes;  // what the run changes, for the run header
};

// Reads train.init_checkpoint and adopts its architecture into `config`: every [model] key the run's config file
// and --set do not give (`given`, config/config.h given_keys) takes the checkpoint's value; a given key that
// differs is kept where may_differ_from_initial_checkpoint allows it and an InputError naming it otherwise. The
// data's tokenizer must be the checkpoint's (the ids must mean the same tokens). `config` is validated again.
InitialCheckpoint adopt_initial_checkpoint(Config& config, const std::set<std::string>& given,
                                           const Tokenizer& data_tokenizer);

// Reads rl.init_checkpoint for an objective that trains on rollouts: the run adopts the checkpoint's architecture
// and data settings (RL reads no corpus, but they are validated with the architecture), its prompt format (an
// imported chat model's chatml) unless the run's config sets [chat] itself, and the objective that trained it as
// rl.policy with its [diffusion] settings, so that a diffusion model is denoised and scored as the diffusion model
// it is (docs/rl.md, "Diffusion policies"), never decoded as a causal one. `config` is validated again.
InitialCheckpoint adopt_initial_policy(Config& config);

// Loads the checkpoint's weights into `model` (built from the adopted config): every weight must find its
// parameter; a head untied from the embedding starts as the embedding; other parameters the checkpoint lacks (the
// new weights of an allowed change) keep their initialisation and are named in the returned notes. InputError for
// a checkpoint weight the model has no place for.
std::vector<std::string> load_initial_weights(LanguageModelImpl& model, const InitialCheckpoint& initial);

}  // namespace inkstone::cli
