// Packed documents (data.document_mask): attention and every convolution stay within a token's own document, so
// no information crosses a packed document boundary (docs/backbones.md, "QKV convolution", and the same for short
// conv and hidden decoding).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/batch.h"
#include "models/language_model.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

using testing::max_abs_diff;

TEST(PackedDocuments, AnEosEndsItsDocumentForBidirectionalModelsAndOpensTheNextForCausalOnes) {
  const auto tokens = torch::tensor({5, 2, 7, 8, 2, 9, 4}, torch::kLong).view({1, 7});
  EXPECT_TRUE(torch::equal(packed_documents(tokens, {/*eos=*/2, /*eos_opens=*/false}),
                           torch::tensor({0, 0, 1, 1, 1, 2, 2}, torch::kLong).view({1, 7})));
  EXPECT_TRUE(torch::equal(packed_documents(tokens, {/*eos=*/2, /*eos_opens=*/true}),
                           torch::tensor({0, 1, 1, 1, 2, 2, 2}, torch::kLong).view({1, 7})));
}

struct Variant {
  const char* name;
  std::function<void(ModelConfig&)> apply;
};

class PackedDocumentModels : public ::testing::TestWithParam<Variant> {};

// A row packing a 5-token and a 4-token document gives each document the logits it has alone (RoPE depends on
// relative positions only, so the second document's shifted positions change nothing beyond rounding).
TEST_P(PackedDocumentModels, EachDocumentGivesTheLogitsItHasAlone) {
  torch::manual_seed(3);
  auto c = testing::tiny_model_config(/*init_std=*/0.2);
  c.n_layers = 2;
  GetParam().apply(c);
  auto model = build_language_model(c, 37);
  torch::NoGradGuard no_grad;
  const auto first = torch::randint(0, 37, {2, 5}, torch::kLong);
  const auto second = torch::randint(0, 37, {2, 4}, torch::kLong);
  const auto packed = torch::cat({first, second}, 1);
  const auto documents = torch::cat({torch::zeros({2, 5}, torch::kLong), torch::ones({2, 4}, torch::kLong)}, 1);
  for (const MaskMode mode : {MaskMode::causal, MaskMode::bidirectional}) {
    WindowInputs args;
    args.mask = mode;
    const auto unmasked = model(packed, args);
    args.documents = documents;
    const auto logits = model(packed, args);
    WindowInputs alone;
    alone.mask = mode;
    EXPECT_LT(max_abs_diff(logits.narrow(1, 0, 5), model(first, alone)), 1e-5) << GetParam().name;
    EXPECT_LT(max_abs_diff(logits.narrow(1, 5, 4), model(second, alone)), 1e-5) << GetParam().name;
    // Without the document mask the second document does read the first.
    EXPECT_GT(max_abs_diff(unmasked.narrow(1, 5, 4), logits.narrow(1, 5, 4)), 1e-4) << GetParam().name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, PackedDocumentModels,
    ::testing::Values(Variant{"plain", [](ModelConfig&) {}},
                      Variant{"short_conv", [](ModelConfig& c) { c.mixer_pattern = "CA"; }},
                      Variant{"qkv_conv",
                              [](ModelConfig& c) {
                                c.qkv_conv = true;
                                c.qkv_conv_zero_init = false;
                              }},
                      Variant{"hidden_streams",
                              [](ModelConfig& c) {
                                c.hidden_streams = 2;
                                c.hidden_attention = "LX";
                              }}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace inkstone
