// Config loading: defaults, typing, every error path, overrides, and the runnable examples in configs/.
#include <gtest/gtest.h>

#include <filesystem>

#include "config/config.h"
#include "core/errors.h"
#include "tests/test_paths.h"

namespace inkstone {
namespace {

std::string error_of(const std::string& toml, const std::vector<std::string>& overrides = {}) {
  try {
    config_from_string(toml, "cfg.toml", overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsAreValidAndRoundTripThroughToml) {
  Config defaults = default_config();
  EXPECT_EQ(defaults.objective.name, "ar");
  EXPECT_DOUBLE_EQ(defaults.optim.learning_rate, 1e-3);
  std::string text = config_to_toml(defaults, /*with_docs=*/true);
  Config reread = config_from_string(text, "defaults.toml");
  EXPECT_EQ(config_to_toml(reread), config_to_toml(defaults));
}

TEST(Config, ValuesOverrideDefaults) {
  Config c = config_from_string("[optim]\nlearning_rate = 3e-4\nno_decay = [\"norm\"]\n[model]\nd_model = 64\n"
                                "tie_embeddings = false\n[run]\nname = \"x\"\n",
                                "cfg.toml");
  EXPECT_DOUBLE_EQ(c.optim.learning_rate, 3e-4);
  EXPECT_EQ(c.optim.no_decay, std::vector<std::string>{"norm"});
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.run.name, "x");
}

TEST(Config, IntegerIsAcceptedForANumber) {
  Config c = config_from_string("[optim]\ngrad_clip = 2\n", "cfg.toml");
  EXPECT_DOUBLE_EQ(c.optim.grad_clip, 2.0);
}

TEST(Config, MisspeltKeyNamesFileLineAndSuggestion) {
  EXPECT_EQ(error_of("[optim]\nbeta1 = 0.9\nlerning_rate = 1e-3\n"),
            "unknown key 'lerning_rate' in [optim] at cfg.toml:3; did you mean 'learning_rate'?");
}

TEST(Config, KeyInTheWrongSectionSaysWhereItBelongs) {
  EXPECT_EQ(error_of("[train]\nlearning_rate = 1e-3\n"),
            "unknown key 'learning_rate' in [train] at cfg.toml:2; it belongs in [optim]");
}

TEST(Config, UnknownSectionIsAnError) {
  EXPECT_EQ(error_of("[optimizer]\nlearning_rate = 1e-3\n"),
            "unknown section [optimizer] at cfg.toml:1; did you mean [optim]?");
}

TEST(Config, WrongTypeNamesKeyAndValue) {
  EXPECT_EQ(error_of("[train]\nsteps = \"many\"\n"), "key 'train.steps' at cfg.toml:2 must be integer, got 'many'");
  EXPECT_EQ(error_of("[train]\nsteps = 1.5\n"), "key 'train.steps' at cfg.toml:2 must be integer, got 1.5");
  EXPECT_EQ(error_of("[model]\ntie_embeddings = 1\n"),
            "key 'model.tie_embeddings' at cfg.toml:2 must be boolean, got 1");
  EXPECT_EQ(error_of("[optim]\nno_decay = [1]\n"),
            "key 'optim.no_decay' at cfg.toml:2 must be list of strings, got [ 1 ]");
}

TEST(Config, OutOfRangeValueIsAnError) {
  EXPECT_EQ(error_of("[optim]\nbeta2 = 1.5\n"), "key 'optim.beta2' at cfg.toml:2 is 1.5, must be in [0, 1]");
  EXPECT_EQ(error_of("[train]\nsteps = 0\n"), "key 'train.steps' at cfg.toml:2 is 0, must be >= 1");
}

TEST(Config, ChoiceIsCheckedWithSuggestion) {
  EXPECT_EQ(error_of("[schedule]\nkind = \"cosin\"\n"),
            "key 'schedule.kind' at cfg.toml:2 is 'cosin', must be one of: cosine, wsd, constant; "
            "did you mean 'cosine'?");
}

// A key with a fixed set of values is parsed once into its enum: read by name, refused by name with a suggestion,
// written back by name, and taken from the command line the same way.
TEST(Config, AnEnumKeyIsReadAndWrittenByItsNames) {
  Config c = config_from_string("[run]\nparam_dtype = \"bf16\"\n[gflowrl]\nnorm = \"paper\"\n", "cfg.toml",
                                {"grpo.aggregation=\"dr_grpo\""});
  EXPECT_EQ(c.run.param_dtype, FloatFormat::bf16);
  EXPECT_EQ(c.run.precision, FloatFormat::fp32);  // the default
  EXPECT_EQ(c.gflowrl.norm, LengthNorm::paper);
  EXPECT_EQ(c.grpo.aggregation, LossAggregation::dr_grpo);
  const std::string text = config_to_toml(c);
  EXPECT_NE(text.find("param_dtype = 'bf16'\n"), std::string::npos);
  EXPECT_NE(text.find("aggregation = 'dr_grpo'\n"), std::string::npos);
  const Config reread = config_from_string(text, "written.toml");
  EXPECT_EQ(reread.gflowrl.norm, LengthNorm::paper);
  EXPECT_EQ(error_of("[run]\nparam_dtype = \"bf61\"\n"),
            "key 'run.param_dtype' at cfg.toml:2 is 'bf61', must be one of: fp32, bf16; did you mean 'bf16'?");
  EXPECT_EQ(error_of("[rl]\nreference = 0\n"), "key 'rl.reference' at cfg.toml:2 must be string, got 0");
}

TEST(Config, InvalidTomlNamesTheLine) {
  EXPECT_NE(error_of("[train]\nsteps = = 3\n").find("cfg.toml:2: invalid TOML"), std::string::npos);
}

TEST(Config, CrossFieldRules) {
  EXPECT_EQ(error_of("[model]\nn_heads = 4\nn_kv_heads = 3\n"), "model.n_kv_heads = 3 must divide model.n_heads = 4");
  EXPECT_EQ(error_of("[train]\nbatch_size = 10\ngrad_accum = 3\n"),
            "train.grad_accum = 3 must divide train.batch_size = 10");
}

// Sampling settings that a block-causal model cannot use are refused when the config is read, not at the first
// text sample of a training run.
TEST(Config, BlockCausalModelsRefuseTheWholeWindowBlockCaches) {
  for (const char* key : {"noisy_suffix", "approximate_cache"}) {
    EXPECT_EQ(error_of(std::string("[diffusion]\nblock_size = 16\n[sample]\n") + key + " = true\n"),
              std::string("sample.") + key +
                  " = true is for models trained on whole windows; diffusion.block_size = 16 trains a block-causal "
                  "model, which keeps an exact cache and never reads past its block");
  }
  EXPECT_NE(error_of("[diffusion]\nshifted_outputs = true\n[sample]\napproximate_cache = true\n")
                .find("sample.approximate_cache = true runs a block alone, and diffusion.shifted_outputs = true"),
            std::string::npos);
}

TEST(Config, OverridesAreTyped) {
  Config c = config_from_string("", "cfg.toml",
                                {"optim.learning_rate=3e-4", "train.steps=7", "schedule.kind=wsd",
                                 "model.tie_embeddings=false", "run.name=\"quoted\"", "optim.no_decay=[\"bias\"]"});
  EXPECT_DOUBLE_EQ(c.optim.learning_rate, 3e-4);
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.schedule.kind, LrScheduleKind::wsd);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.run.name, "quoted");
  EXPECT_EQ(c.optim.no_decay, std::vector<std::string>{"bias"});
}

TEST(Config, BadOverridesAreErrors) {
  EXPECT_EQ(error_of("", {"train.steps=abc"}),
            "key 'train.steps' at --set train.steps=abc must be integer, got 'abc'");
  EXPECT_EQ(error_of("", {"optim.lerning_rate=1"}),
            "unknown key 'lerning_rate' in [optim] at --set optim.lerning_rate=1; did you mean 'learning_rate'?");
  EXPECT_EQ(error_of("", {"steps=3"}), "--set 'steps=3' must look like section.key=value");
}

TEST(Config, MissingFileIsAnError) {
  EXPECT_THROW(load_config("/nonexistent/cfg.toml"), InputError);
}

TEST(Config, EveryExampleInConfigsLoads) {
  int count = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(testing::source_dir() / "configs")) {
    // configs/sweeps holds sweep files, checked with their runs' configs in tests/sweep.
    if (entry.path().extension() != ".toml" || entry.path().parent_path().filename() == "sweeps") continue;
    SCOPED_TRACE(entry.path().filename().string());
    EXPECT_NO_THROW(load_config(entry.path().string()));
    ++count;
  }
  EXPECT_GT(count, 0);
}

}  // namespace
}  // namespace inkstone
