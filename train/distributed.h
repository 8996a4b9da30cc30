// The process group of a data-parallel run over libtorch's c10d (Gloo on CPU, NCCL on CUDA) and the collectives
// the trainer uses: broadcasts of parameters, reductions of metrics and gradient buckets, a gather through the store.
// Where a process sits in a launch is train/launch_env.h; gradient buckets are train/gradient_synchroniser.h.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/types.h>

#include "train/launch_env.h"

namespace inkstone {

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

}  // namespace inkstone
