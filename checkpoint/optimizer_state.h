// AdamW's per-parameter state as named tensors, keyed by parameter name so a checkpoint survives a fresh
// optimizer, a reordered parameter list and a libtorch whose internal state keys differ (core/torch_compat.h).
#pragma once
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "checkpoint/safetensors.h"

namespace inkstone {

// For every parameter with state: "<name>.exp_avg", "<name>.exp_avg_sq", "<name>.step" (0-d int64) and, with
// amsgrad, "<name>.max_exp_avg_sq". A parameter that never received a gradient has only "<name>.step" = 0.
// A state may also hold "<name>.master" (train/master_weights.h), which the importer accepts and leaves alone.
// `parameters` are the (name, parameter) pairs of the optimizer's param groups.
NamedTensors export_adamw_state(torch::optim::AdamW& optimizer, const NamedTensors& parameters);

// Replaces the optimizer's per-parameter state with `state` (as export_adamw_state wrote it), on each
// parameter's device and dtype, so that continuing training is bitwise identical to never having stopped.
// An entry for an unknown parameter, a parameter with no entries (incomplete state), a missing or misshapen piece
// is an InputError naming `origin`.
// Hyperparameters (lr, betas, ...) are not part of this state: see adamw_hyperparameters.
void import_adamw_state(torch::optim::AdamW& optimizer, const NamedTensors& parameters, const NamedTensors& state,
                        const std::string& origin);

// The options of each param group, [{"lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad"}, ...]: libtorch
// restores none of them on load, and a schedule changes lr between steps.
// The entries of `state` (an exported state of the parameters `all`) that belong to `subset` (a ZeRO rank's
// shard); an entry of no parameter of `all` is an InputError naming `origin`.
NamedTensors adamw_state_subset(const NamedTensors& state, const NamedTensors& all, const NamedTensors& subset,
                                const std::string& origin);
nlohmann::json adamw_hyperparameters(const torch::optim::AdamW& optimizer);
void set_adamw_hyperparameters(torch::optim::AdamW& optimizer, const nlohmann::json& groups,
                               const std::string& origin);

}  // namespace inkstone
