// The CLI's run set-up applies the run's process-wide settings.
#include <gtest/gtest.h>

#include <ATen/Context.h>

#include "config/config.h"
#include "tools/run_setup.h"

namespace inkstone {
namespace {

TEST(RunSetup, Tf32ForCudaMatmulsFollowsTheConfig) {
  for (const bool tf32 : {true, false}) {
    const Config config = config_from_string("[data]\ntokenizer = \"byte\"\n", "test.toml",
                                             {std::string("run.tf32=") + (tf32 ? "true" : "false")});
    cli::prepare_run(config);
    EXPECT_EQ(at::globalContext().allowTF32CuBLAS(), tf32);
    EXPECT_EQ(at::globalContext().allowTF32CuDNN(), tf32);
  }
}

}  // namespace
}  // namespace inkstone
