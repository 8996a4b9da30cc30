// Capture and restore libtorch's global random generators, so a resumed run draws the same numbers
// (dropout masks, noise levels, sampled tokens) as one that never stopped.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace inkstone {

// {"cpu": base64 of the default CPU generator's state, "cuda": [base64 per device]}. The CUDA list is present
// only in CUDA builds running with a GPU.
nlohmann::json capture_rng_state();

// Restores what capture_rng_state() returned. CUDA states are restored for the devices both the record and this
// machine have (a GPU run may be inspected on a CPU-only machine); a malformed record is an InputError naming
// `origin`.
void restore_rng_state(const nlohmann::json& state, const std::string& origin);

}  // namespace inkstone
