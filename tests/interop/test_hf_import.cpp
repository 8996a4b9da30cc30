// Hugging Face import: logits equal to transformers' on golden fixtures (tests/interop/fixtures, made by
// make_fixtures.py with the real package), the tokenizer's roles and chat format, and one-line refusals that
// write nothing.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "interop/hf_config.h"
#include "tests/cli_run.h"
#include "tools/run_setup.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using testing::hf_fixture;
using testing::run_cli;

std::map<std::string, torch::Tensor> read_named(const fs::path& file) {
  std::map<std::string, torch::Tensor> named;
  for (auto& [name, tensor] : read_safetensors(file).tensors) named[name] = tensor;
  return named;
}

// Max |inkstone − transformers| over the fixture's logits, after importing through the CLI.
double import_and_compare(const std::string& fixture, const fs::path& run, const std::string& expected_file) {
  const auto imported = run_cli({"import", "hf", hf_fixture(fixture).string(), "--out", run.string()});
  EXPECT_EQ(imported.exit_code, 0) << imported.output;
  auto trained = cli::load_trained_model(run.string(), "cpu");
  auto expected = read_named(hf_fixture(fixture) / expected_file);
  torch::NoGradGuard no_grad;
  const auto logits = trained.model->forward(expected["input_ids"]);
  EXPECT_EQ(logits.sizes(), expected["logits"].sizes());
  return (logits - expected["logits"]).abs().max().item<double>();
}

class HfImportLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(HfImportLogits, MatchTransformersWithinTolerance) {
  const auto dir = testing::temp_dir("hf_import_" + GetParam());
  EXPECT_LT(import_and_compare(GetParam(), dir / "run", "expected.safetensors"), 1e-4);
  if (fs::exists(hf_fixture(GetParam()) / "expected_long.safetensors")) {
    // 100 positions, past the scaled RoPE's original context of 64.
    auto trained = cli::load_trained_model((dir / "run").string(), "cpu");
    auto expected = read_named(hf_fixture(GetParam()) / "expected_long.safetensors");
    torch::NoGradGuard no_grad;
    const auto logits = trained.model->forward(expected["input_ids"]);
    EXPECT_LT((logits - expected["logits"]).abs().max().item<double>(), 1e-4);
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfImportLogits,
                         ::testing::Values("qwen3_tied", "qwen3_untied_bf16_sharded", "qwen2_bias", "llama3_scaling",
                                           "llama_linear", "mistral"));

TEST(HfImport, ReadsTheConfigExactly) {
  const auto qwen3 = read_hf_config(hf_fixture("qwen3_tied") / "config.json");
  EXPECT_EQ(qwen3.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(qwen3.model.head_dim, 32);  // not hidden_size / heads = 16
  EXPECT_EQ(qwen3.model.n_kv_heads, 2);
  EXPECT_TRUE(qwen3.model.qk_norm);
  EXPECT_TRUE(qwen3.model.tie_embeddings);
  EXPECT_EQ(qwen3.model.rope_theta, 1e6);
  const auto qwen2 = read_hf_config(hf_fixture("qwen2_bias") / "config.json");
  EXPECT_EQ(qwen2.model.attention_bias, AttentionBias::qkv);
  EXPECT_FALSE(qwen2.model.qk_norm);
  const auto llama = read_hf_config(hf_fixture("llama3_scaling") / "config.json");
  EXPECT_EQ(llama.model.rope_scaling, RopeScalingKind::llama3);
  EXPECT_EQ(llama.model.rope_scaling_factor, 8.0);
  EXPECT_EQ(llama.model.rope_original_max_len, 64);
  EXPECT_EQ(llama.dtype, "float16");
}

TEST(HfImport, CarriesTokenizerRolesAndTheChatFormat) {
  const auto dir = testing::temp_dir("hf_import_roles");
  ASSERT_EQ(run_cli({"import", "hf", hf_fixture("qwen3_tied").string(), "--out", (dir / "run").string()}).exit_code, 0);
  auto trained = cli::load_trained_model((dir / "run").string(), "cpu");
  const Tokenizer& tokenizer = *trained.tokenizer;
  EXPECT_EQ(tokenizer.token_bytes(tokenizer.specials().eos), "<|im_end|>");
  EXPECT_EQ(tokenizer.token_bytes(tokenizer.specials().pad), "<|endoftext|>");
  EXPECT_EQ(tokenizer.specials().bos, -1);
  EXPECT_EQ(tokenizer.specials().mask, -1);  // nothing appended: the tokenizer keeps its 403 ids
  EXPECT_EQ(tokenizer.vocab_size(), 403);
  EXPECT_STREQ(choice_name(trained.config.chat.format), "chatml");
  EXPECT_STREQ(choice_name(trained.config.chat.prompt_start), "none");
  EXPECT_EQ(trained.config.chat.stop_tokens, std::vector<std::string>{"<|endoftext|>"});
  EXPECT_EQ(trained.config.model.vocab_size, 512);
  fs::remove_all(dir);
}

// A broken copy of a fixture: each defect is refused with exit 2 and one line naming the file and key or tensor,
// and no run folder appears.
class HfImportRefuses : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("hf_import_bad");
    fs::copy(hf_fixture("qwen3_untied_bf16_sharded"), dir_ / "src");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void edit_config(const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json config;
    std::ifstream(dir_ / "src" / "config.json") >> config;
    change(config);
    std::ofstream(dir_ / "src" / "config.json") << config.dump(2);
  }

  void expect_refused(const std::vector<std::string>& mentions) {
    const auto result = run_cli({"import", "hf", (dir_ / "src").string(), "--out", (dir_ / "run").string()});
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
    for (const auto& text : mentions) EXPECT_NE(result.output.find(text), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(dir_ / "run"));
  }

  fs::path dir_;
};

TEST_F(HfImportRefuses, AMissingShard) {
  fs::remove(dir_ / "src" / "model-00002-of-00004.safetensors");
  expect_refused({"model-00002-of-00004.safetensors", "missing"});
}

TEST_F(HfImportRefuses, AShapeThatDisagreesWithTheConfig) {
  edit_config([](nlohmann::json& c) { c["intermediate_size"] = 80; });
  expect_refused({"mlp.gate_proj.weight", "[96, 64]", "[80, 64]"});
}

TEST_F(HfImportRefuses, AnUnknownArchitecture) {
  edit_config([](nlohmann::json& c) { c["architectures"] = {"GPTNeoXForCausalLM"}; });
  expect_refused({"config.json", "GPTNeoXForCausalLM"});
}

TEST_F(HfImportRefuses, AnUnsupportedRopeType) {
  edit_config([](nlohmann::json& c) { c["rope_parameters"]["rope_type"] = "yarn"; });
  expect_refused({"config.json", "rope_type", "yarn"});
}

TEST_F(HfImportRefuses, ASlidingWindowInUse) {
  edit_config([](nlohmann::json& c) { c["use_sliding_window"] = true; });
  expect_refused({"config.json", "use_sliding_window"});
}

TEST_F(HfImportRefuses, ATensorOfAnotherDtype) {
  const fs::path shard = dir_ / "src" / "model-00001-of-00004.safetensors";
  auto file = read_safetensors(shard);
  file.tensors[0].second = file.tensors[0].second.to(torch::kFloat64);
  write_safetensors(shard, file.tensors, file.metadata);
  expect_refused({"model-00001-of-00004.safetensors", file.tensors[0].first, "dtype"});
}

TEST_F(HfImportRefuses, ATensorWithNoPlaceInTheModel) {
  const fs::path shard = dir_ / "src" / "model-00001-of-00004.safetensors";
  auto file = read_safetensors(shard);
  file.tensors.emplace_back("model.layers.0.mlp.extra.weight", torch::zeros({2}));
  write_safetensors(shard, file.tensors, file.metadata);
  nlohmann::json index;
  std::ifstream(dir_ / "src" / "model.safetensors.index.json") >> index;
  index["weight_map"]["model.layers.0.mlp.extra.weight"] = "model-00001-of-00004.safetensors";
  std::ofstream(dir_ / "src" / "model.safetensors.index.json") << index.dump();
  expect_refused({"model.layers.0.mlp.extra.weight", "no place"});
}

}  // namespace
}  // namespace inkstone
