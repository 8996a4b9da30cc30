// Small fixtures several suites share: a tiny backbone config, a tiny prepared corpus, InputError messages.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "config/config.h"
#include "core/errors.h"
#include "dataset/byte_tokenizer.h"
#include "dataset/data_prepare.h"

namespace inkstone::testing {

// The largest elementwise difference, in float64 whatever the dtypes.
inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// The largest elementwise difference relative to the largest magnitude of `want`, in float64.
inline double max_relative_diff(const torch::Tensor& got, const torch::Tensor& want) {
  return max_abs_diff(got, want) / want.to(torch::kDouble).abs().max().item<double>();
}

// A 2-layer, 32-wide Qwen3 block stack; init_std above 0.02 makes logits differ visibly between tokens.
inline ModelConfig tiny_model_config(double init_std, bool time_conditioning = false) {
  ModelConfig c = default_config().model;  // every key has its documented default
  c.arch = Architecture::qwen3;
  c.vocab_size = 0;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 0;
  c.ffn_dim = 0;
  c.max_seq_len = 64;
  c.rope_theta = 10000.0;
  c.norm_eps = 1e-6;
  c.tie_embeddings = !time_conditioning;  // adaLN-Zero zero-initialises an untied head
  c.init = "normal";
  c.init_std = init_std;
  c.time_conditioning = time_conditioning;
  c.cond_dim = 8;
  return c;
}

// Byte-tokenised sentences over twelve words, one document per file, prepared into dir/data (train and val).
inline std::filesystem::path prepare_word_corpus(const std::filesystem::path& dir) {
  const auto text_dir = dir / "text";
  std::filesystem::create_directories(text_dir);
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "while", "dogs", "ran", "far", "away", "home"};
  uint64_t state = 7;
  for (int doc = 0; doc < 24; ++doc) {
    std::ofstream out(text_dir / ("doc" + std::to_string(100 + doc) + ".txt"));
    for (int w = 0; w < 60; ++w) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      out << words[(state >> 33) % 12] << ((w % 9 == 8) ? ".\n" : " ");
    }
  }
  PrepareOptions options;
  options.inputs = {text_dir};
  options.out_dir = dir / "data";
  options.val_fraction = 0.2;
  prepare_data(options, ByteTokenizer());
  return dir / "data";
}

// The message of the InputError that `f` throws; empty when it throws none.
inline std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace inkstone::testing
