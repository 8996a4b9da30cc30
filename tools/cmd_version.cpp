// `inkstone version`: the versions, devices, BLAS and threads this binary runs with.
#include <fmt/format.h>
#include <torch/cuda.h>
#include <ATen/Parallel.h>

#include "core/platform.h"
#include "core/torch_compat.h"
#include "tools/commands.h"

namespace inkstone::cli {

void add_version_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("version", "Print versions, CUDA devices, BLAS and threads");
  cmd->callback([&action] {
    action = [] {
      fmt::print("inkstone {}\n", INKSTONE_VERSION);
      fmt::print("libtorch {}\n", compat::torch_version());
#ifdef INKSTONE_CUDA
      const bool built_with_cuda = true;
#else
      const bool built_with_cuda = false;
#endif
      const bool cuda = torch::cuda::is_available();
      fmt::print("cuda: {} (built {})\n", cuda ? "available" : "not available",
                 built_with_cuda ? "with CUDA" : "CPU-only");
      if (cuda) fmt::print("cuda devices: {}\n", torch::cuda::device_count());
      fmt::print("blas: {}{}\n", blas_library(), blas_is_reference() ? "  (REFERENCE BLAS: slow, see below)" : "");
      fmt::print("threads: {} (libtorch intra-op; runs set run.threads)\n", at::get_num_threads());
      warn_if_reference_blas();
      return 0;
    };
  });
}

}  // namespace inkstone::cli
