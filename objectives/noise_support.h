// The noise support: the one set of ids that uniform noise emits, that the model's softmax ranges over and
// whose size N enters every 1/N term (docs/diffusion.md, "Noise support"). Masked diffusion uses it for x-hat too.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "config/config.h"
#include "dataset/tokenizer.h"

namespace inkstone {

class NoiseSupport {
 public:
  // Every id but the tokenizer's specials, plus eos (documents end with it, so it must be predictable);
  // with include_specials, every id but pad and mask. `model_vocab` >= tokenizer vocab: padded ids are outside.
  NoiseSupport(const Tokenizer& tokenizer, int64_t model_vocab, bool include_specials);
  // An explicit set (tests).
  NoiseSupport(std::vector<int64_t> ids, int64_t model_vocab);

  int64_t size() const { return static_cast<int64_t>(ids_.size()); }  // N
  const std::vector<int64_t>& ids() const { return ids_; }
  // [V] bool on `device`: true for ids in the support.
  torch::Tensor member_mask(torch::Device device) const;
  // Logits with every id outside the support at -inf, so softmax ranges over the support only.
  torch::Tensor restrict_logits(const torch::Tensor& logits) const;
  // Uniform draws from the support, shaped like `like`, as int64 on its device.
  torch::Tensor sample_uniform(const torch::Tensor& like, at::Generator* generator = nullptr) const;
  // True where every token of `tokens` lies in the support (clean data must, or its loss is infinite).
  bool contains_all(const torch::Tensor& tokens) const;

 private:
  std::vector<int64_t> ids_;
  int64_t model_vocab_;
  torch::Tensor ids_cpu_;   // [N] int64
  torch::Tensor mask_cpu_;  // [V] bool
};

}  // namespace inkstone
