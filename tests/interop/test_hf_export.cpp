// Hugging Face export: import -> export is bitwise on the tensors, transformers loads the export with the same
// logits and chat prompt ids (when the project's Python environment is present), the parameter list a config
// implies is the model's, and models without an HF equivalent are refused by feature.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "core/errors.h"
#include "dataset/prompt_format.h"
#include "interop/hf_config.h"
#include "interop/hf_weights.h"
#include "models/block_registry.h"
#include "models/language_model.h"
#include "tests/cli_run.h"
#include "tools/run_setup.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using testing::hf_fixture;
using testing::run_cli;

void import_and_export(const std::string& fixture, const fs::path& dir, const std::vector<std::string>& extra = {}) {
  const auto imported = run_cli({"import", "hf", hf_fixture(fixture).string(), "--out", (dir / "run").string()});
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
  std::vector<std::string> args = {"export", "hf", (dir / "run").string(), "--out", (dir / "export").string()};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto exported = run_cli(args);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
}

void expect_same_tensors(const fs::path& a, const fs::path& b) {
  const HfCheckpointFiles left(a), right(b);
  ASSERT_EQ(left.names(), right.names());
  for (const auto& name : left.names()) {
    const auto x = left.read(name), y = right.read(name);
    EXPECT_EQ(x.scalar_type(), y.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(x, y)) << name;
  }
}

TEST(HfExport, ImportThenExportIsBitwiseInBf16Shards) {
  const auto dir = testing::temp_dir("hf_export_bf16");
  import_and_export("qwen3_untied_bf16_sharded", dir, {"--shard-size", "100KB"});
  EXPECT_TRUE(fs::exists(dir / "export" / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir / "export" / "model-00002-of-00004.safetensors"));
  expect_same_tensors(hf_fixture("qwen3_untied_bf16_sharded"), dir / "export");
  const auto back = read_hf_config(dir / "export" / "config.json");
  const auto source = read_hf_config(hf_fixture("qwen3_untied_bf16_sharded") / "config.json");
  Config a = default_config(), b = default_config();
  a.model = back.model;
  b.model = source.model;
  EXPECT_EQ(config_to_toml(a), config_to_toml(b));
  EXPECT_EQ(back.dtype, "bfloat16");
  fs::remove_all(dir);
}

TEST(HfExport, ImportThenExportIsBitwiseForTiedAndBiasedModels) {
  for (const std::string fixture : {"qwen3_tied", "qwen2_bias", "llama3_scaling"}) {
    const auto dir = testing::temp_dir("hf_export_" + fixture);
    import_and_export(fixture, dir);
    expect_same_tensors(hf_fixture(fixture), dir / "export");
    fs::remove_all(dir);
  }
}

TEST(HfExport, RefusesAnExistingFolder) {
  const auto dir = testing::temp_dir("hf_export_exists");
  ASSERT_EQ(run_cli({"import", "hf", hf_fixture("qwen3_tied").string(), "--out", (dir / "run").string()}).exit_code, 0);
  fs::create_directories(dir / "export");
  std::ofstream(dir / "export" / "keep.txt") << "mine";
  const auto result = run_cli({"export", "hf", (dir / "run").string(), "--out", (dir / "export").string()});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("already exists"), std::string::npos) << result.output;
  EXPECT_TRUE(fs::exists(dir / "export" / "keep.txt"));
  fs::remove_all(dir);
}

TEST(HfExport, RefusesFeaturesWithoutAnHfEquivalentByName) {
  const std::vector<std::pair<std::function<void(ModelConfig&)>, std::string>> cases = {
      {[](ModelConfig& m) { m.residual = ResidualMode::mhar; }, "model.residual"},
      {[](ModelConfig& m) { m.width_profile = WidthProfile::geometric; }, "model.width_profile"},
      {[](ModelConfig& m) { m.mixer_pattern = "CA"; }, "short conv"},
      {[](ModelConfig& m) { m.ffn_pattern = "M"; }, "MoE"},
      {[](ModelConfig& m) { m.hidden_streams = 2; }, "model.hidden_streams"},
      {[](ModelConfig& m) { m.time_conditioning = true; }, "model.time_conditioning"},
      {[](ModelConfig& m) { m.qkv_conv = true; }, "model.qkv_conv"},
      {[](ModelConfig& m) { m.arch = Architecture::llama; }, "model.qk_norm"},
  };
  for (const auto& [change, feature] : cases) {
    ModelConfig model = default_config().model;
    change(model);
    try {
      hf_architecture_for(model);
      ADD_FAILURE() << feature << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(feature), std::string::npos) << e.what();
    }
  }
}

// Every registered block part says whether a Hugging Face architecture has it; a part that does not is refused by
// its description whichever letter it has, so a newly registered part cannot be exported by omission.
TEST(HfExport, EveryBlockPartWithoutAnHfEquivalentIsRefused) {
  const auto verdict = [](const std::function<void(ModelConfig&)>& change) -> std::string {
    ModelConfig model = default_config().model;
    change(model);
    try {
      hf_architecture_for(model);
      return "";
    } catch (const InputError& e) {
      return e.what();
    }
  };
  // Each kind in a pattern after a part Hugging Face has ("A" + letter, "D" + letter).
  const auto check_kinds = [&](const auto& kinds, std::string ModelConfig::*pattern, const std::string& first) {
    for (const auto& kind : kinds) {
      const auto refusal = verdict([&](ModelConfig& m) { m.*pattern = first + kind.letter; });
      if (kind.exportable_to_hf)
        EXPECT_EQ(refusal, "") << kind.description;
      else
        EXPECT_NE(refusal.find(kind.description), std::string::npos) << refusal;
    }
  };
  check_kinds(token_mixer_kinds(), &ModelConfig::mixer_pattern, "A");
  check_kinds(feed_forward_kinds(), &ModelConfig::ffn_pattern, "D");
}

// The shapes export and import assume, against a model actually built from the same config.
TEST(HfExport, ParameterShapesAreTheBuiltModels) {
  const std::vector<std::function<void(ModelConfig&)>> variants = {
      [](ModelConfig&) {},
      [](ModelConfig& m) { m.tie_embeddings = false; },
      [](ModelConfig& m) { m.arch = Architecture::qwen2, m.qk_norm = false, m.attention_bias = AttentionBias::qkv; },
      [](ModelConfig& m) { m.arch = Architecture::llama, m.qk_norm = false, m.attention_bias = AttentionBias::all, m.head_dim = 24; },
  };
  for (const auto& change : variants) {
    ModelConfig model = default_config().model;
    model.d_model = 48, model.n_layers = 2, model.n_heads = 4, model.n_kv_heads = 2;
    change(model);
    const auto built = build_language_model(model, 300);
    std::vector<std::pair<std::string, std::vector<int64_t>>> actual, implied;
    for (const auto& p : built->named_parameters()) actual.emplace_back(p.key(), p.value().sizes().vec());
    for (const auto& p : hf_parameter_shapes(model, 300)) implied.emplace_back(p.name, p.shape);
    std::sort(actual.begin(), actual.end());
    std::sort(implied.begin(), implied.end());
    EXPECT_EQ(actual, implied) << choice_name(model.arch);
    for (const auto& [name, shape] : implied) EXPECT_NO_THROW(hf_name(name)) << name;
  }
}

// `eval --dump-logits` gives what the model computes, and transformers computes the same from the export.
TEST(HfExport, TransformersLoadsTheExportWithEqualLogitsAndChatIds) {
  const auto python = testing::reference_python();
  if (python.empty()) GTEST_SKIP() << "no .venv with transformers (make setup-python)";
  for (const std::string fixture : {"qwen3_tied", "qwen2_bias", "llama3_scaling", "mistral"}) {
    const auto dir = testing::temp_dir("hf_export_tf_" + fixture);
    import_and_export(fixture, dir);
    std::ofstream(dir / "ids.txt") << "1 5 9 33 120 7 7 2 300 45\n3 3 3 250 11 90 18 60 1 0\n";
    const auto dumped = run_cli({"eval", "--run-dir", (dir / "run").string(), "--token-ids", (dir / "ids.txt").string(),
                                 "--dump-logits", (dir / "logits.safetensors").string()});
    ASSERT_EQ(dumped.exit_code, 0) << dumped.output;
    const std::string message = "What is 12 + 30? Answer briefly.";
    const auto checked = testing::run_command(
        {python.string(), (testing::source_dir() / "tests" / "interop" / "check_with_transformers.py").string(),
         (dir / "export").string(), (dir / "logits.safetensors").string(), "--chat-message", message});
    ASSERT_EQ(checked.exit_code, 0) << checked.output;
    const auto report = nlohmann::json::parse(checked.output.substr(checked.output.rfind('{')));
    EXPECT_LT(report["max_abs_diff"].get<double>(), 1e-4) << fixture;
    EXPECT_EQ(report["model_class"], read_hf_config(hf_fixture(fixture) / "config.json").architecture);
    auto trained = cli::load_trained_model((dir / "run").string(), "cpu");
    const PromptFormat format(trained.config.chat, *trained.tokenizer);
    EXPECT_EQ(report["chat_ids"].get<std::vector<int32_t>>(), format.encode(message)) << fixture;
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace inkstone
