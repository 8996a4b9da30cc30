// The CLI's run set-up applies the run's process-wide settings.
#include <gtest/gtest.h>

#include <ATen/Context.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/module_weights.h"
#include "config/config.h"
#include "core/errors.h"
#include "dataset/byte_tokenizer.h"
#include "tests/fixtures.h"
#include "tests/test_paths.h"
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

// A checkpoint's pieces must agree: config.toml naming another objective than the one state.json says trained the
// weights would sample them as what they are not.
TEST(RunSetup, ACheckpointWhoseConfigNamesAnotherObjectiveIsRefused) {
  const auto dir = testing::temp_dir("objective_mismatch");
  const Config config = config_from_string("[model]\nd_model = 32\nn_layers = 1\nn_heads = 2\nmax_seq_len = 16\n"
                                           "[data]\nseq_len = 8\n[objective]\nname = \"uniform_diffusion\"\n",
                                           "test.toml");
  CheckpointData data;
  data.step = 1;
  data.model = module_weights(*build_language_model(config.model, 260));
  data.config_toml = config_to_toml(config);
  data.tokenizer = ByteTokenizer().to_json();
  data.state = {{"objective", "ar"}};
  save_checkpoint(dir, data, 0);
  EXPECT_EQ(testing::input_error_of([&] { cli::load_trained_model(dir.string(), "cpu"); }),
            (dir / "checkpoints" / "step_000001").string() + ": config.toml names objective 'uniform_diffusion' but "
            "state.json records that objective 'ar' trained these weights");
  data.state = {{"objective", "uniform_diffusion"}};
  save_checkpoint(dir, data, 0);
  EXPECT_EQ(cli::load_trained_model(dir.string(), "cpu").step, 1);
}

}  // namespace
}  // namespace inkstone
