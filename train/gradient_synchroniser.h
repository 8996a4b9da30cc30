// Gradients summed across the ranks of a data-parallel run while backward runs, in buckets, as DDP does.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "checkpoint/safetensors.h"
#include "train/distributed.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace inkstone {

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
