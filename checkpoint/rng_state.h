// Capture and restore libtorch's global random generators, so a resumed run draws the same numbers
// (dropout masks, noise levels, sampled tokens) as one that never stopped.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace inkstone {

// {"cpu": base64 of the default CPU generator's state, "cuda": [base64 per device]}. The CUDA list is present
// only in CUDA builds running with a GPU.
nlohmann::json capture_rng_state();

// Restores what capture_rng_state() returned. CUDA states are restored for the devices both the record and this
// machine have (a GPU run may be inspected on a CPU-only machine); a malformed record is an InputError naming
// `origin`.
void restore_rng_state(const nlohmann::json& state, const std::string& origin);

// What a checkpoint of a run records of its random generators, from every rank's capture_rng_state() text in rank
// order (rank 0's first): "rng" (rank 0's), "world_size" and, with several ranks, "rng_ranks" (every rank's).
nlohmann::json run_rng_record(const std::vector<std::string>& rank_states);

// Restores the generators of rank `rank` of `world_size` from a checkpoint state written at `step`: its "rng_ranks"
// entry, or "rng" for a single process. A checkpoint written by another number of ranks is an InputError, unless
// it was consolidated (`inkstone checkpoint consolidate`): then rank 0 takes "rng" and every other rank a fresh
// stream (seed_rank_stream of the step), so the run continues on any number of ranks, though not bitwise as the
// original would have.
void restore_rank_rng(const nlohmann::json& state, int64_t rank, int64_t world_size, int64_t step);

// Seeds the generators of rank `rank` > 0 by (seed, rank): each rank of a data-parallel run draws its own noise
// (diffusion times, dropout) while rank 0 keeps the single-process stream.
void seed_rank_stream(uint64_t seed, int64_t rank);

}  // namespace inkstone
