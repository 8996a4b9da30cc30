// Data-parallel training over libtorch's c10d: where this process sits in a launch, the process group (Gloo on
// CPU, NCCL on CUDA), collectives for parameters and metrics, and a gradient all-reduce overlapped with backward.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "checkpoint/safetensors.h"
#include "config/config.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

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

// A collective that failed or timed out: another rank died, hung or lost its connection.
class DistributedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ReduceOp { sum, min, max };

// A collective in flight (Distributed::start_broadcast); Distributed::wait completes it.
struct PendingWork;
using PendingCollective = std::shared_ptr<PendingWork>;

// The process group of a launch. A default-constructed one is a single process: every collective is a no-op.
class Distributed {
 public:
  Distributed();
  // Rendezvous through a TCPStore on MASTER_ADDR:MASTER_PORT (hosted by rank 0), then a Gloo group on CPU or an
  // NCCL group on CUDA (CUDA builds). Joining, every collective and every store read fail with a
  // DistributedError after `timeout` instead of waiting for a rank that is gone.
  Distributed(const LaunchEnv& env, torch::Device device, std::chrono::milliseconds timeout);
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }
  bool is_main() const { return rank_ == 0; }
  bool active() const { return world_size_ > 1; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Copies rank `root`'s values into every rank's tensors, in place.
  void broadcast_from(std::vector<torch::Tensor> tensors, int64_t root);
  // The same, started without waiting: the tensors must stay alive and untouched until wait(). Null when there
  // is nothing to wait for (a single process).
  PendingCollective start_broadcast(std::vector<torch::Tensor> tensors, int64_t root);
  void wait(const PendingCollective& pending);
  void broadcast_from_main(std::vector<torch::Tensor> tensors) { broadcast_from(std::move(tensors), 0); }
  // Reduces each tensor across ranks in place and waits for the result.
  void all_reduce(std::vector<torch::Tensor> tensors, ReduceOp op);
  // Starts a sum all-reduce of `flat` in place, or with `root` a sum reduce whose result only rank `root`'s
  // `flat` holds; wait_all() completes every started one, in start order, and wait() this one.
  PendingCollective start_sum(torch::Tensor flat, std::optional<int64_t> root = std::nullopt);
  void wait_all();
  // Every rank's `text` on rank 0 (in rank order); other ranks get an empty list. Goes through the store, so
  // `key` must be unique for each call (e.g. include the step).
  std::vector<std::string> gather_to_main(const std::string& key, const std::string& text);

 private:
  struct Group;
  int64_t rank_ = 0;
  int64_t world_size_ = 1;
  std::chrono::milliseconds timeout_{0};
  std::unique_ptr<Group> group_;
};

// What a checkpoint of a data-parallel run adds to its state: "world_size" and, with several ranks, "rng_ranks"
// (every rank's random generators, gathered on rank 0 through the store; rank 0's entry equals "rng"). Every
// rank calls it at the same step; only rank 0's result is complete.
nlohmann::json rank_checkpoint_state(Distributed& distributed, int64_t step);
// Restores this rank's random generators from a checkpoint state: its "rng_ranks" entry, or "rng" for a single
// process. A checkpoint written by another number of ranks is an InputError, unless it was consolidated
// (`inkstone checkpoint consolidate`): then rank 0 takes "rng" and every other rank a stream seeded by (step,
// rank), so the run continues on any number of ranks, though not bitwise as the original would have.
void restore_rank_rng(const nlohmann::json& state, const Distributed& distributed, int64_t step);

// Sums the gradients of `parameters` across ranks while backward runs, the way DistributedDataParallel does:
// parameters are packed into buckets of about `bucket_bytes` (in reverse order, roughly the order backward
// produces them); a hook on each parameter copies its accumulated gradient into its bucket, and a full bucket is
// all-reduced asynchronously while autograd continues. Only a backward after arm() is synchronised, so earlier
// micro-batches of an accumulated step cost no communication.
// With `owners` (ZeRO stages 2 and 3, train/zero_sharding.h: the rank that updates each parameter), a bucket holds
// the parameters of one owner and is reduced to that rank only. During the step's last backward the other ranks
// forget such a gradient as soon as it is in its bucket, and free the bucket once at most one newer foreign
// bucket is still in flight, so a rank keeps the gradients of its own shard plus about two buckets.
class GradientSynchroniser {
 public:
  GradientSynchroniser(Distributed& distributed, const NamedTensors& parameters, int64_t bucket_bytes,
                       std::vector<int64_t> owners = {});
  ~GradientSynchroniser();
  GradientSynchroniser(const GradientSynchroniser&) = delete;
  GradientSynchroniser& operator=(const GradientSynchroniser&) = delete;

  // The next backward is the step's last: its hooks fill and send the buckets.
  void arm();
  // After that backward: sends the buckets whose parameters got no gradient, waits for every bucket and writes
  // the sums over ranks into the gradients (a parameter without a gradient keeps none).
  void finish();

  Distributed& distributed() const { return distributed_; }

 private:
  struct Bucket;
  void on_gradient(size_t parameter, const torch::Tensor& incoming);
  void send(Bucket& bucket);
  torch::Tensor slot(size_t parameter);  // the parameter's view into its bucket's buffer (allocated on first use)
  bool owned(size_t parameter) const { return owners_.empty() || owners_[parameter] == distributed_.rank(); }

  Distributed& distributed_;
  std::vector<torch::Tensor> parameters_;
  std::vector<int64_t> owners_;  // empty: every rank keeps every gradient (all-reduce)
  std::vector<unsigned> hook_handles_;
  // The gradient accumulators of foreign parameters, kept alive so that their post-hooks stay (autograd would
  // otherwise make new ones each backward).
  std::vector<std::shared_ptr<torch::autograd::Node>> foreign_accumulators_;
  std::shared_ptr<bool> forgetting_;  // read by those post-hooks: true during the armed backward
  std::deque<std::pair<size_t, PendingCollective>> foreign_in_flight_;  // bucket index, its reduce
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;   // parameter -> bucket
  std::vector<int64_t> offset_of_;  // parameter -> its offset in the bucket's flat buffer
  std::vector<bool> ready_;
  bool armed_ = false;
};

}  // namespace inkstone
