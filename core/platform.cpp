// Machine facts: which BLAS the process mapped, thread count, device choice.
#include "core/platform.h"

#include <csignal>

#include <malloc.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <torch/cuda.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include "core/errors.h"

namespace inkstone {

std::string blas_library() {
  // libtorch links libblas.so.3 dynamically; the mapped file tells which alternative is active.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    std::string name = std::filesystem::path(path).filename().string();
    if (name.rfind("libblas", 0) == 0 || name.rfind("libopenblas", 0) == 0 || name.rfind("libmkl_core", 0) == 0 ||
        name.rfind("libblis", 0) == 0) {
      std::error_code ec;
      auto real = std::filesystem::canonical(path, ec);
      return ec ? path : real.string();
    }
  }
  return "none (libtorch's built-in kernels)";
}

bool blas_is_reference() {
  const std::string lib = blas_library();
  return lib.find("/blas/libblas") != std::string::npos;
}

void warn_if_reference_blas() {
  static bool warned = false;
  if (warned || !blas_is_reference()) return;
  warned = true;
  fmt::print(stderr,
             "\n*** WARNING: libtorch is using the reference BLAS ({}), about 35x slower on matmuls.\n"
             "*** Fix: apt-get install libopenblas0-openmp (or: make setup)\n\n",
             blas_library());
}

torch::Device resolve_device(const std::string& device) {
  const bool cuda = torch::cuda::is_available();
  if (device == "cpu") return torch::kCPU;
  if (device == "cuda") {
    if (!cuda) throw InputError("run.device = 'cuda' but no CUDA device is available (use 'auto' or 'cpu')");
    return torch::kCUDA;
  }
  if (device == "auto") return cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() <= 9 &&
      device.find_first_not_of("0123456789", 5) == std::string::npos) {
    const int index = std::stoi(device.substr(5));
    if (!cuda || index >= static_cast<int>(torch::cuda::device_count()))
      throw InputError(fmt::format("device '{}' is not available ({} CUDA devices)", device,
                                   cuda ? torch::cuda::device_count() : 0));
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  throw InputError(fmt::format("unknown device '{}' (auto | cpu | cuda | cuda:N)", device));
}

void allow_tf32(bool allowed) {
  at::globalContext().setAllowTF32CuBLAS(allowed);
  at::globalContext().setAllowTF32CuDNN(allowed);
}

void keep_freed_memory_for_reuse() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest allowed threshold on 64-bit
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

void report_file_size_limit_as_write_error() { std::signal(SIGXFSZ, SIG_IGN); }

void require_memory(double bytes, const torch::Device& device, const std::string& what) {
  if (!device.is_cpu()) return;
  const double physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (physical > 0 && bytes > physical)
    throw InputError(fmt::format("{} needs about {:.1f} GiB, more than this machine's {:.1f} GiB of memory", what,
                                 bytes / (1 << 30), physical / (1 << 30)));
}

void set_threads(int64_t threads) {
  // More intra-op threads than cores only adds contention: 1000 threads on 2 cores did not finish two steps of
  // a tiny model in a minute.
  const auto cores = static_cast<int64_t>(std::thread::hardware_concurrency());
  if (cores > 0 && threads > cores)
    throw InputError(fmt::format("run.threads = {} is more than this machine's {} cores", threads, cores));
  at::set_num_threads(static_cast<int>(threads));
}

}  // namespace inkstone
