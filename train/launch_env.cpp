// Where this process sits in a launch: torchrun's, `inkstone launch`'s or Slurm's environment variables.
#include "train/launch_env.h"

#include <cstdlib>
#include <optional>

#include <fmt/format.h>
#ifdef INKSTONE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#endif

#include "core/errors.h"

namespace inkstone {

std::optional<std::string> env_text(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

namespace {

int64_t env_integer(const char* name, const std::string& text, int64_t lo, int64_t hi) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < lo || value > hi)
    throw InputError(fmt::format("environment variable {}='{}' must be an integer in [{}, {}]", name, text, lo, hi));
  return value;
}

int64_t required_integer(const char* name, const char* why, int64_t lo, int64_t hi) {
  auto text = env_text(name);
  if (!text) throw InputError(fmt::format("environment variable {} is not set ({})", name, why));
  return env_integer(name, *text, lo, hi);
}

}  // namespace

LaunchEnv launch_env_from_environment() {
  LaunchEnv env;
  const char* why = "a distributed launch sets it; torchrun and `inkstone launch` do";
  if (auto rank = env_text("RANK")) {
    env.world_size = required_integer("WORLD_SIZE", why, 1, 1 << 20);
    env.rank = env_integer("RANK", *rank, 0, env.world_size - 1);
    env.local_rank = env_text("LOCAL_RANK") ? required_integer("LOCAL_RANK", why, 0, 1 << 20) : 0;
  } else if (auto procid = env_text("SLURM_PROCID")) {
    env.world_size = required_integer("SLURM_NTASKS", "srun sets it with SLURM_PROCID", 1, 1 << 20);
    env.rank = env_integer("SLURM_PROCID", *procid, 0, env.world_size - 1);
    env.local_rank = env_text("SLURM_LOCALID") ? required_integer("SLURM_LOCALID", why, 0, 1 << 20) : 0;
  } else {
    return env;
  }
  if (!env.distributed()) return env;
  const char* rendezvous = "the address and port where rank 0 hosts the rendezvous store";
  env.master_addr = env_text("MASTER_ADDR").value_or("");
  if (env.master_addr.empty())
    throw InputError(fmt::format("environment variable MASTER_ADDR is not set ({})", rendezvous));
  env.master_port = static_cast<int>(required_integer("MASTER_PORT", rendezvous, 1, 65535));
  env.agent_hosts_store = env_text("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  return env;
}

torch::Device device_of_rank(torch::Device device, const LaunchEnv& env) {
  if (!device.is_cuda()) return device;
#ifdef INKSTONE_CUDA
  const auto gpus = static_cast<int64_t>(torch::cuda::device_count());
  if (env.local_rank >= gpus)
    throw InputError(fmt::format("LOCAL_RANK {} needs GPU {}, but this node has {} GPU(s): start at most {} "
                                 "processes per node",
                                 env.local_rank, env.local_rank, gpus, gpus));
  const auto index = static_cast<c10::DeviceIndex>(env.local_rank);
  c10::cuda::set_device(index);
  return torch::Device(torch::kCUDA, index);
#else
  return device;
#endif
}

std::chrono::milliseconds timeout_of(const DistributedConfig& config) {
  return std::chrono::milliseconds(static_cast<int64_t>(config.timeout_s * 1000.0));
}

}  // namespace inkstone
