// The process group of a data-parallel run on c10d: rendezvous, and the collectives the trainer uses, each turning
// a failure or a timeout into a DistributedError that names what was going on.
#include "train/distributed.h"

#include <deque>
#include <optional>

#include <fmt/format.h>

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO  // Debian's libtorch and the pip wheels are built with Gloo; its header asks for this macro
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(INKSTONE_CUDA) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "core/errors.h"
#include "core/torch_compat.h"

namespace inkstone {
namespace {

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

}  // namespace inkstone
