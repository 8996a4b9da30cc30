// Data-parallel training on c10d. The gradient path follows PyTorch DDP's Reducer (Li et al., "PyTorch
// Distributed", VLDB 2020, section 3.2): bucketed all-reduce started from gradient hooks, overlapped with backward.
#include "train/distributed.h"

#include <cstdlib>
#include <deque>
#include <optional>

#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO  // Debian's libtorch and the pip wheels are built with Gloo; its header asks for this macro
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef INKSTONE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif
#if defined(INKSTONE_CUDA) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "checkpoint/rng_state.h"
#include "core/counter_hash.h"
#include "core/errors.h"
#include "core/torch_compat.h"

namespace inkstone {
namespace {

std::optional<std::string> env_text(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

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

// The first line of an exception's message: c10 errors append a C++ backtrace that helps nobody here.
std::string first_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  return text.substr(0, text.find('\n'));
}

c10d::ReduceOp c10d_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return c10d::ReduceOp::SUM;
    case ReduceOp::min: return c10d::ReduceOp::MIN;
    case ReduceOp::max: return c10d::ReduceOp::MAX;
  }
  throw std::logic_error("unknown ReduceOp");
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
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

struct Distributed::Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::CollectiveBackend> backend;
  std::deque<c10::intrusive_ptr<c10d::Work>> in_flight;  // started by start_sum(), in start order
};

Distributed::Distributed() = default;

Distributed::Distributed(const LaunchEnv& env, torch::Device device, std::chrono::milliseconds timeout)
    : rank_(env.rank), world_size_(env.world_size), timeout_(timeout), group_(std::make_unique<Group>()) {
  const std::string where = fmt::format("{}:{}", env.master_addr, env.master_port);
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(env.master_port);
    options.isServer = env.rank == 0 && !env.agent_hosts_store;
    options.numWorkers = static_cast<size_t>(env.world_size);
    options.waitWorkers = true;
    options.timeout = timeout;
    group_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& e) {
    throw DistributedError(fmt::format("rank {}: rendezvous at {} with {} ranks failed within {} s: {}", rank_,
                                       where, world_size_, timeout.count() / 1000.0, first_line(e)));
  }
  try {
    if (device.is_cuda()) {
#if defined(INKSTONE_CUDA) && defined(USE_C10D_NCCL)
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      group_->backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(group_->store, static_cast<int>(rank_),
                                                                   static_cast<int>(world_size_), options);
#else
      throw InputError("distributed training on CUDA needs a libtorch built with NCCL; this one has none");
#endif
    } else {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      // Loopback rendezvous: bind to loopback too (the host name may not resolve). GLOO_SOCKET_IFNAME picks the
      // network interface on clusters, as in PyTorch.
      const auto interface = env_text("GLOO_SOCKET_IFNAME");
      options->devices.push_back(interface                      ? c10d::ProcessGroupGloo::createDeviceForInterface(*interface)
                                 : is_loopback(env.master_addr) ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                                                : c10d::ProcessGroupGloo::createDefaultDevice());
      options->threads = 2;
      group_->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(group_->store, static_cast<int>(rank_),
                                                                   static_cast<int>(world_size_), options);
    }
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistributedError(fmt::format("rank {}: creating the {} process group of {} ranks failed within {} s: {}",
                                       rank_, device.is_cuda() ? "NCCL" : "Gloo", world_size_,
                                       timeout.count() / 1000.0, first_line(e)));
  }
}

Distributed::~Distributed() = default;

namespace {

// Runs one communication step, turning any failure into a DistributedError that says what most likely happened.
template <typename F>
void guarded(int64_t rank, std::chrono::milliseconds timeout, const char* what, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    throw DistributedError(fmt::format(
        "rank {}: {} failed: {} (another rank exited, stopped responding for distributed.timeout_s = {} s, or lost "
        "its connection)",
        rank, what, first_line(e), timeout.count() / 1000.0));
  }
}

// A broadcast copies bits: Gloo has no bf16 (nor int16) type, so bf16 travels as the fp16 view of the same memory,
// which it copies without reading (docs/training.md, "Precision").
torch::Tensor bits_of(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? t.view(torch::kHalf) : t;
}

}  // namespace

struct PendingWork {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::string what;
};

void Distributed::broadcast_from(std::vector<torch::Tensor> tensors, int64_t root) {
  wait(start_broadcast(std::move(tensors), root));
}

PendingCollective Distributed::start_broadcast(std::vector<torch::Tensor> tensors, int64_t root) {
  if (!active()) return nullptr;
  auto pending = std::make_shared<PendingWork>();
  pending->what = fmt::format("broadcast from rank {}", root);
  guarded(rank_, timeout_, pending->what.c_str(), [&] {
    torch::NoGradGuard no_grad;
    c10d::BroadcastOptions options;
    options.rootRank = root;
    // One tensor per call: c10d reads several tensors of one call as copies on several local devices.
    for (auto& t : tensors) {
      std::vector<torch::Tensor> one{bits_of(t)};
      pending->works.push_back(group_->backend->broadcast(one, options));
    }
  });
  return pending;
}

void Distributed::wait(const PendingCollective& pending) {
  if (!pending) return;
  guarded(rank_, timeout_, pending->what.c_str(), [&] {
    for (auto& work : pending->works) work->wait();
  });
}

void Distributed::all_reduce(std::vector<torch::Tensor> tensors, ReduceOp op) {
  if (!active() || tensors.empty()) return;
  guarded(rank_, timeout_, "metric all-reduce", [&] {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> flat_parts;
    for (const auto& t : tensors) flat_parts.push_back(t.detach().reshape({-1}).to(torch::kDouble));
    std::vector<torch::Tensor> flat{torch::cat(flat_parts)};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d_op(op);
    group_->backend->allreduce(flat, options)->wait();
    int64_t offset = 0;
    for (auto& t : tensors) {
      t.copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  });
}

PendingCollective Distributed::start_sum(torch::Tensor flat, std::optional<int64_t> root) {
  if (!active()) return nullptr;
  auto pending = std::make_shared<PendingWork>();
  pending->what = root ? "gradient reduce" : "gradient all-reduce";
  guarded(rank_, timeout_, pending->what.c_str(), [&] {
    std::vector<torch::Tensor> one{std::move(flat)};
    if (root) {
      c10d::ReduceOptions options;
      options.rootRank = *root;
      group_->in_flight.push_back(group_->backend->reduce(one, options));
    } else {
      group_->in_flight.push_back(group_->backend->allreduce(one));
    }
    pending->works.push_back(group_->in_flight.back());
  });
  return pending;
}

void Distributed::wait_all() {
  if (!active()) return;
  guarded(rank_, timeout_, "gradient all-reduce", [&] {
    while (!group_->in_flight.empty()) {
      auto work = group_->in_flight.front();
      group_->in_flight.pop_front();
      work->wait();
    }
  });
}

std::vector<std::string> Distributed::gather_to_main(const std::string& key, const std::string& text) {
  if (!active()) return {text};
  std::vector<std::string> texts;
  guarded(rank_, timeout_, "gathering per-rank state on rank 0", [&] {
    auto slot = [&](int64_t r) { return fmt::format("inkstone/{}/{}", key, r); };
    if (!is_main()) {
      group_->store->set(slot(rank_), std::vector<uint8_t>(text.begin(), text.end()));
      return;
    }
    texts.push_back(text);
    for (int64_t r = 1; r < world_size_; ++r) {
      const auto bytes = group_->store->get(slot(r));  // waits up to the store's timeout
      texts.emplace_back(bytes.begin(), bytes.end());
      group_->store->deleteKey(slot(r));
    }
  });
  return texts;
}

nlohmann::json rank_checkpoint_state(Distributed& distributed, int64_t step) {
  nlohmann::json state = {{"world_size", distributed.world_size()}};
  const auto texts = distributed.gather_to_main(fmt::format("rng/{}", step), capture_rng_state().dump());
  if (distributed.active() && distributed.is_main()) {
    state["rng_ranks"] = nlohmann::json::array();
    for (const auto& text : texts) state["rng_ranks"].push_back(nlohmann::json::parse(text));
  }
  return state;
}

void restore_rank_rng(const nlohmann::json& state, const Distributed& distributed, int64_t step) {
  if (state.value("consolidated", false)) {
    restore_rng_state(state.value("rng", nlohmann::json()), "state.json");
    if (!distributed.is_main())
      torch::manual_seed(counter_hash({static_cast<uint64_t>(step), static_cast<uint64_t>(distributed.rank())}));
    return;
  }
  const auto world_size = state.find("world_size");
  if (world_size != state.end() && !world_size->is_number_integer())
    throw InputError(fmt::format("checkpoint step {}: state.json 'world_size' must be an integer", step));
  const int64_t saved_ranks = world_size == state.end() ? 1 : world_size->get<int64_t>();
  if (saved_ranks != distributed.world_size())
    throw InputError(fmt::format("checkpoint step {} was written by {} rank(s) but this run has {}: resume with "
                                 "the same number of processes (each rank's random stream is restored)",
                                 step, saved_ranks, distributed.world_size()));
  if (!distributed.active()) {
    restore_rng_state(state.value("rng", nlohmann::json()), "state.json");
    return;
  }
  const auto streams = state.value("rng_ranks", nlohmann::json());
  if (!streams.is_array() || static_cast<int64_t>(streams.size()) != saved_ranks)
    throw InputError(fmt::format("checkpoint step {}: state.json 'rng_ranks' must hold {} entries", step, saved_ranks));
  restore_rng_state(streams.at(static_cast<size_t>(distributed.rank())), "state.json");
}

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
