// Where this process sits in a launch (rank, world size, local rank, rendezvous address), read from the
// environment that torchrun, `inkstone launch` or Slurm set.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <torch/types.h>

#include "config/config.h"

namespace inkstone {

// This process's place in a launch, read from the variables torchrun and `inkstone launch` set (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or, when RANK is unset, Slurm's srun (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID; MASTER_ADDR and MASTER_PORT still come from the job script).
struct LaunchEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  // torchrun's agent already hosts the TCPStore (TORCHELASTIC_USE_AGENT_STORE=True): rank 0 joins as a client.
  bool agent_hosts_store = false;

  bool distributed() const { return world_size > 1; }
};

// No launch variables: a single process. A malformed or inconsistent variable is an InputError naming it.
LaunchEnv launch_env_from_environment();

// One GPU per rank: cuda:LOCAL_RANK, made the current device, when `device` is CUDA; otherwise `device`.
torch::Device device_of_rank(torch::Device device, const LaunchEnv& env);

std::chrono::milliseconds timeout_of(const DistributedConfig& config);

// The value of environment variable `name`; none when it is unset or empty.
std::optional<std::string> env_text(const char* name);

}  // namespace inkstone
