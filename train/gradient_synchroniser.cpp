// Gradients summed across ranks while backward runs. The path follows PyTorch DDP's Reducer (Li et al., "PyTorch
// Distributed", VLDB 2020, section 3.2): bucketed all-reduce started from gradient hooks, overlapped with backward.
#include "train/gradient_synchroniser.h"

#include <optional>
#include <stdexcept>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

namespace inkstone {

namespace {

// Forgets a foreign parameter's gradient right after autograd has accumulated it in the armed backward: it is in
// its bucket already (ZeRO stages 2 and 3).
class ForgetGradient : public torch::autograd::FunctionPostHook {
 public:
  ForgetGradient(torch::Tensor parameter, std::shared_ptr<bool> armed)
      : parameter_(std::move(parameter)), armed_(std::move(armed)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (*armed_) parameter_.mutable_grad().reset();
    return outputs;
  }

 private:
  torch::Tensor parameter_;
  std::shared_ptr<bool> armed_;
};

// Foreign buckets whose reduce may still be running while backward goes on; older ones are waited for and freed.
constexpr size_t kForeignBucketsInFlight = 2;

}  // namespace

struct GradientSynchroniser::Bucket {
  torch::Tensor flat;  // allocated when the first gradient arrives
  int64_t numel = 0;
  std::optional<int64_t> root;  // the owner a bucket is reduced to; none: all-reduced
  std::vector<size_t> members;
  size_t pending = 0;  // members whose gradient has not arrived in the armed backward
  bool sent = false;
};

GradientSynchroniser::GradientSynchroniser(Distributed& distributed, const NamedTensors& parameters,
                                           int64_t bucket_bytes, std::vector<int64_t> owners)
    : distributed_(distributed), owners_(std::move(owners)) {
  for (const auto& [name, p] : parameters) parameters_.push_back(p);
  const size_t n = parameters_.size();
  if (!owners_.empty() && owners_.size() != n)
    throw std::invalid_argument("GradientSynchroniser: one owner per parameter");
  bucket_of_.resize(n);
  offset_of_.resize(n);
  ready_.assign(n, false);
  if (!distributed_.active()) return;

  // Reverse order: backward reaches the last layers first, so their bucket fills (and is sent) first.
  std::vector<std::vector<size_t>> groups;
  int64_t bytes = 0;
  for (size_t k = n; k-- > 0;) {
    const auto& p = parameters_[k];
    const size_t last = groups.empty() ? 0 : groups.back().front();
    const bool fits = !groups.empty() && bytes + static_cast<int64_t>(p.nbytes()) <= bucket_bytes &&
                      parameters_[last].dtype() == p.dtype() && (owners_.empty() || owners_[last] == owners_[k]);
    if (!fits) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += static_cast<int64_t>(p.nbytes());
  }
  for (const auto& members : groups) {
    Bucket bucket;
    bucket.members = members;
    for (size_t k : members) {
      bucket_of_[k] = buckets_.size();
      offset_of_[k] = bucket.numel;
      bucket.numel += parameters_[k].numel();
    }
    bucket.root = owners_.empty() ? std::nullopt : std::optional<int64_t>(owners_[members.front()]);
    buckets_.push_back(std::move(bucket));
  }
  for (size_t k = 0; k < n; ++k)
    hook_handles_.push_back(parameters_[k].register_hook([this, k](torch::Tensor grad) { on_gradient(k, grad); }));
  forgetting_ = std::make_shared<bool>(false);
  for (size_t k = 0; k < n; ++k) {
    if (owned(k)) continue;
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters_[k]);
    accumulator->add_post_hook(std::make_unique<ForgetGradient>(parameters_[k], forgetting_));
    foreign_accumulators_.push_back(std::move(accumulator));
  }
}

GradientSynchroniser::~GradientSynchroniser() {
  for (size_t k = 0; k < hook_handles_.size(); ++k) parameters_[k].remove_hook(hook_handles_[k]);
}

void GradientSynchroniser::arm() {
  if (!distributed_.active()) return;
  armed_ = true;
  *forgetting_ = true;
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.members.size();
    bucket.sent = false;
  }
}

torch::Tensor GradientSynchroniser::slot(size_t parameter) {
  Bucket& bucket = buckets_[bucket_of_[parameter]];
  const auto& p = parameters_[parameter];
  if (!bucket.flat.defined()) {
    // Gradients of bf16 parameters are summed in fp32 (bf16 sums would round once per rank).
    const auto sum_dtype = c10::elementSize(p.scalar_type()) < 4 ? torch::kFloat : p.scalar_type();
    bucket.flat = torch::empty({bucket.numel}, torch::TensorOptions().dtype(sum_dtype).device(p.device()));
  }
  return bucket.flat.narrow(0, offset_of_[parameter], p.numel()).view(p.sizes());
}

// A hook on a leaf runs before autograd adds `incoming` to .grad, so the parameter's gradient over all
// micro-batches of the step is .grad + incoming.
void GradientSynchroniser::on_gradient(size_t parameter, const torch::Tensor& incoming) {
  if (!armed_ || !incoming.defined()) return;  // libtorch 2.x also calls the hook for an absent gradient
  if (ready_[parameter])
    throw std::logic_error("a parameter received two gradients in one backward");
  torch::NoGradGuard no_grad;
  const torch::Tensor& accumulated = parameters_[parameter].grad();
  torch::Tensor into = slot(parameter);
  if (accumulated.defined())
    torch::add_out(into, accumulated, incoming);
  else
    into.copy_(incoming);
  ready_[parameter] = true;
  Bucket& bucket = buckets_[bucket_of_[parameter]];
  if (--bucket.pending == 0) send(bucket);
}

void GradientSynchroniser::send(Bucket& bucket) {
  bucket.sent = true;
  PendingCollective pending = distributed_.start_sum(bucket.flat, bucket.root);
  if (!bucket.root || *bucket.root == distributed_.rank()) return;
  foreign_in_flight_.emplace_back(static_cast<size_t>(&bucket - buckets_.data()), std::move(pending));
  while (foreign_in_flight_.size() > kForeignBucketsInFlight) {
    distributed_.wait(foreign_in_flight_.front().second);
    buckets_[foreign_in_flight_.front().first].flat = torch::Tensor();
    foreign_in_flight_.pop_front();
  }
}

void GradientSynchroniser::finish() {
  if (!distributed_.active()) return;
  armed_ = false;
  torch::NoGradGuard no_grad;
  // Parameters the last backward did not reach still contribute what earlier micro-batches accumulated.
  // Every rank runs the same graph, so the buckets are sent in the same order everywhere, as c10d requires.
  for (auto& bucket : buckets_) {
    if (bucket.sent) continue;
    for (size_t k : bucket.members) {
      if (ready_[k]) continue;
      const torch::Tensor& grad = parameters_[k].grad();
      if (grad.defined())
        slot(k).copy_(grad);
      else
        slot(k).zero_();
    }
    send(bucket);
  }
  distributed_.wait_all();
  foreign_in_flight_.clear();
  *forgetting_ = false;
  for (size_t k = 0; k < parameters_.size(); ++k) {
    if (!owned(k)) {
      parameters_[k].mutable_grad().reset();  // reduced into its owner's gradient
      continue;
    }
    const torch::Tensor& grad = parameters_[k].grad();
    if (grad.defined()) parameters_[k].mutable_grad().copy_(slot(k));
  }
  // A bucket another rank owns has served its purpose; ours stays allocated for the next step.
  for (auto& bucket : buckets_)
    if (bucket.root && *bucket.root != distributed_.rank()) bucket.flat = torch::Tensor();
}

}  // namespace inkstone
