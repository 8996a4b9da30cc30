// Hidden decoding (docs/backbones.md, "Hidden decoding"): n = 1 is the plain model, the slots interleave the
// streams and the loss reads the last one, incremental decoding with n cache slots per token equals the full
// forward, and the stream-local and cross-stream masks let exactly the allowed slots through.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "config/config.h"
#include "models/attention.h"
#include "models/hidden_streams.h"
#include "models/language_model.h"
#include "models/model_dims.h"
#include "tests/fixtures.h"
#include "tests/models/decode_fixtures.h"

namespace inkstone {
namespace {

using testing::max_abs_diff;

ModelConfig streams_config(int64_t n, const std::string& attention = "LX") {
  auto c = testing::tiny_model_config(/*init_std=*/0.2);
  c.hidden_streams = n;
  c.hidden_attention = attention;
  return c;
}

// Test 1: one stream builds the same parameters and gives the same logits bit for bit, whatever the other
// hidden-decoding keys say.
TEST(HiddenStreams, OneStreamIsThePlainModel) {
  auto c = streams_config(1, "L");
  c.hidden_positions = HiddenPositions::per_token;
  c.hidden_local_sees_token = true;
  torch::manual_seed(1);
  auto plain = build_language_model(testing::tiny_model_config(0.2), 37);
  torch::manual_seed(1);
  auto one = build_language_model(c, 37);
  EXPECT_EQ(one->named_parameters().keys(), plain->named_parameters().keys());
  EXPECT_EQ(one->forward_flops_per_token(16), plain->forward_flops_per_token(16));
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 37, {2, 9}, torch::kLong);
  for (MaskMode mode : {MaskMode::causal, MaskMode::bidirectional}) {
    WindowInputs args;
    args.mask = mode;
    EXPECT_TRUE(torch::equal(one(tokens, args), plain(tokens, args)));
  }
}

// Test 2: slot n·t + s holds stream s of token t; the readout keeps slots n·t + n − 1; positions are consecutive
// over the slots or shared by a token's streams; a token's flags repeat over its slots.
TEST(HiddenStreams, SlotsInterleaveStreamsAndTheReadoutKeepsTheLast) {
  auto c = streams_config(3);
  const StreamLayout layout(c);
  const auto tokens = torch::tensor({4, 9, 2, 7}, torch::kDouble).view({1, 4, 1});
  std::vector<torch::Tensor> copies;
  for (int64_t s = 0; s < 3; ++s) copies.push_back(tokens * 10 + s);
  const auto slots = layout.interleave(copies).view({-1});
  ASSERT_EQ(slots.size(0), 12);
  for (int64_t p = 0; p < 12; ++p)
    EXPECT_EQ(slots[p].item<double>(), tokens[0][p / 3][0].item<double>() * 10 + p % 3) << "slot " << p;

  const auto read = layout.last_stream(torch::arange(12, torch::kLong).view({1, 12}));
  EXPECT_TRUE(torch::equal(read, torch::tensor({2, 5, 8, 11}, torch::kLong).view({1, 4})));

  const auto positions = torch::tensor({0, 1, 5}, torch::kLong).view({1, 3});
  EXPECT_TRUE(torch::equal(layout.slot_positions(positions),
                           torch::tensor({0, 1, 2, 3, 4, 5, 15, 16, 17}, torch::kLong).view({1, 9})));
  c.hidden_positions = HiddenPositions::per_token;
  EXPECT_TRUE(torch::equal(StreamLayout(c).slot_positions(positions),
                           torch::tensor({0, 0, 0, 1, 1, 1, 5, 5, 5}, torch::kLong).view({1, 9})));
  const auto flags = torch::tensor({false, true}).view({1, 2});
  EXPECT_TRUE(torch::equal(layout.slot_flags(flags),
                           torch::tensor({false, false, false, true, true, true}).view({1, 6})));
  EXPECT_FALSE(layout.slot_flags(torch::Tensor()).defined());
}

// Test 2 at the model: the logits of token t (whose loss is x_{t+1}) are read after all n copies of x_t and
// depend on no later token, under every mix of layers; the earlier streams reach them only through a
// cross-stream layer.
TEST(HiddenStreams, LogitsOfTokenTReadItsStreamsAndNothingLater) {
  torch::manual_seed(2);
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 37, {1, 8}, torch::kLong);
  auto later = tokens.clone();
  later[0][5] = (tokens[0][5].item<int64_t>() + 1) % 37;
  for (const char* attention : {"LX", "XL", "X"}) {
    auto model = build_language_model(streams_config(3, attention), 37);
    const auto logits = model(tokens);
    ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{1, 8, 37}));
    EXPECT_EQ(max_abs_diff(model(later).narrow(1, 0, 5), logits.narrow(1, 0, 5)), 0.0) << attention;
    EXPECT_GT(max_abs_diff(model(later)[0][5], logits[0][5]), 1e-5) << attention;
    // The stream-1 table is read by the last stream only through a cross-stream layer.
    model->stream_embeds[0]->as<torch::nn::EmbeddingImpl>()->weight.normal_();
    EXPECT_GT(max_abs_diff(model(tokens), logits), 1e-5) << attention;
  }
}

// Test 5: with every layer stream-local the last stream never reads the others, and building the model says so.
TEST(HiddenStreams, AllLocalLayersIgnoreTheEarlierStreamsAndWarn) {
  torch::manual_seed(3);
  auto model = build_language_model(streams_config(3, "L"), 37);
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 37, {2, 7}, torch::kLong);
  const auto logits = model(tokens);
  for (const auto& table : *model->stream_embeds) table->as<torch::nn::EmbeddingImpl>()->weight.normal_();
  EXPECT_TRUE(torch::equal(model(tokens), logits));

  const auto stderr_of = [](const std::string& toml) {
    const ModelConfig config = config_from_string(toml, "test.toml").model;
    ::testing::internal::CaptureStderr();
    build_language_model(config, 37);
    return ::testing::internal::GetCapturedStderr();
  };
  const std::string base = "[model]\nn_layers = 4\nhidden_streams = 2\n";
  EXPECT_NE(stderr_of(base + "hidden_attention = \"L\"\n").find("ignores the others"), std::string::npos);
  EXPECT_EQ(stderr_of(base + "hidden_attention = \"LLLX\"\n"), "");
  EXPECT_EQ(stderr_of(base + "hidden_attention = \"L\"\nhidden_local_sees_token = true\n"), "");
}

TEST(HiddenStreams, ConfigRejectsWhatCannotWork) {
  const auto error_of = [](const std::string& toml) {
    return testing::input_error_of([&] { config_from_string(toml, "test.toml"); });
  };
  EXPECT_NE(error_of("[model]\nn_layers = 4\nhidden_streams = 2\nhidden_attention = \"LLX\"\n")
                .find("model.hidden_attention = \"LLX\" has 3 letters"),
            std::string::npos);
  EXPECT_NE(error_of("[model]\nhidden_streams = 2\nhidden_attention = \"LM\"\n").find("allowed letters: LX"),
            std::string::npos);
  EXPECT_NE(error_of("[model]\nhidden_streams = 2\nqkv_conv = true\n").find("model.qkv_conv"), std::string::npos);
  EXPECT_NE(error_of("[model]\nhidden_streams = 0\n").find("hidden_streams"), std::string::npos);
  // One stream ignores the hidden-decoding pattern.
  EXPECT_EQ(error_of("[model]\nn_layers = 4\nhidden_attention = \"LLX\"\n"), "");
}

// ---- test 3: incremental decoding with n cache slots per token equals the full forward ----

struct StreamsCase {
  const char* name;
  int64_t streams;
  const char* attention;
  const char* positions;
  bool local_sees_token;
};

class HiddenStreamsDecode : public ::testing::TestWithParam<StreamsCase> {};

LanguageModel decode_model(const StreamsCase& variant) {
  auto c = streams_config(variant.streams, variant.attention);
  c.hidden_positions = choice_named<HiddenPositions>(variant.positions).value();
  c.hidden_local_sees_token = variant.local_sees_token;
  auto model = build_language_model(c, 37);
  model->eval();
  return model;
}

TEST_P(HiddenStreamsDecode, EqualsFullForward) {
  torch::manual_seed(4);
  auto model = decode_model(GetParam());
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 37, {2, 12}, torch::kLong);
  const auto full = model(tokens);
  auto cache = model->make_kv_cache(2, 12);
  EXPECT_EQ(cache.capacity(), 12 * GetParam().streams);
  EXPECT_LT(max_abs_diff(testing::decode_in_chunks(model, tokens, {5, 3, 1, 1, 1, 1}, cache), full), 1e-5);
  EXPECT_EQ(cache.length(), 12 * GetParam().streams);
}

TEST_P(HiddenStreamsDecode, LeftPaddedPromptsEqualEachRowAlone) {
  torch::manual_seed(5);
  auto model = decode_model(GetParam());
  torch::NoGradGuard no_grad;
  testing::expect_left_padded_decode_equals_each_row_alone(model, {2, 6, 4}, /*steps=*/3, /*vocab=*/37);
}

INSTANTIATE_TEST_SUITE_P(Layouts, HiddenStreamsDecode,
                         ::testing::Values(StreamsCase{"two_interleaved", 2, "LX", "interleaved", false},
                                           StreamsCase{"three_per_token", 3, "XL", "per_token", false},
                                           StreamsCase{"three_local_sees_token", 3, "L", "interleaved", true},
                                           StreamsCase{"four_mixing", 4, "X", "interleaved", false}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- test 4: which slots each attention layer lets through ----

// Slot j is stream j mod n of token ⌊j/n⌋. Cross-stream: t′ < t, or t′ = t and s′ ≤ s (all slots when
// bidirectional). Stream-local: s′ = s and t′ ≤ t (any t′ when bidirectional), and with same_token also t′ = t and
// s′ ≤ s (any s′ when bidirectional).
bool may_attend(int64_t query, int64_t key, int64_t n, bool local, bool same_token, bool causal) {
  const int64_t tq = query / n, sq = query % n, tk = key / n, sk = key % n;
  if (!local) return !causal || key <= query;
  const bool own_stream = sk == sq && (!causal || tk <= tq);
  const bool own_token = same_token && tk == tq && (!causal || sk <= sq);
  return own_stream || own_token;
}

TEST(HiddenStreams, AttentionMasksLetExactlyTheAllowedSlotsThrough) {
  const int64_t n = 3, tokens = 4, slots = n * tokens;
  auto c = streams_config(n);
  torch::manual_seed(6);
  Attention attention(c, 0);
  torch::NoGradGuard no_grad;
  const auto u = torch::randn({1, slots, c.d_model});
  struct Scope {
    bool local, same_token;
  };
  for (const Scope scope : {Scope{false, false}, Scope{true, false}, Scope{true, true}}) {
    c.hidden_local_sees_token = scope.same_token;
    const StreamLayout layout(c);
    for (const MaskMode mode : {MaskMode::causal, MaskMode::bidirectional}) {
      AttentionContext context;
      context.mode = mode;
      context.rope = rope_table(layout.slot_positions(torch::arange(tokens, torch::kLong).view({1, tokens})),
                                resolved_head_dim(c), c.rope_theta);
      context.mask = scope.local ? layout.local_mask(mode, 0, slots, slots, torch::Tensor(), u.device())
                                 : make_attention_mask(mode, 0, slots, slots, torch::Tensor(), u.device());
      const auto out = attention(u, context);
      for (int64_t key = 0; key < slots; ++key) {
        auto perturbed = u.clone();
        perturbed[0][key] += 1.0;
        const auto changed = (attention(perturbed, context) - out).abs().amax(-1)[0];
        for (int64_t query = 0; query < slots; ++query) {
          const bool allowed = may_attend(query, key, n, scope.local, scope.same_token, mode == MaskMode::causal);
          const double diff = changed[query].item<double>();
          if (allowed || query == key) {
            EXPECT_GT(diff, 1e-6) << "query " << query << " key " << key << " local " << scope.local;
          } else {
            EXPECT_EQ(diff, 0.0) << "query " << query << " key " << key << " local " << scope.local;
          }
        }
      }
    }
  }
}

// The FLOP count runs the body on every slot and the head once per token: n = 2 costs twice the body of a plain
// model at the slots' context (cross-stream) or at the tokens' (stream-local), plus one head.
TEST(HiddenStreams, FlopsCountEverySlotAndOneHead) {
  const int64_t context = 16;
  auto plain = build_language_model(testing::tiny_model_config(0.2), 37);
  const double head = 2.0 * 37 * 32;  // the tied head
  auto mixing = build_language_model(streams_config(2, "X"), 37);
  EXPECT_DOUBLE_EQ(mixing->forward_flops_per_token(context),
                   2 * plain->forward_flops_per_token(2 * context) - head);
  auto local = build_language_model(streams_config(2, "L"), 37);
  EXPECT_DOUBLE_EQ(local->forward_flops_per_token(context), 2 * plain->forward_flops_per_token(context) - head);
  EXPECT_EQ(mixing->param_counts().embedding, 2 * 37 * 32);
}

}  // namespace
}  // namespace inkstone
