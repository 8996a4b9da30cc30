#include "objectives/noise_support.h"

#include <limits>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/host_copy.h"

namespace inkstone {

NoiseSupport::NoiseSupport(const Tokenizer& tokenizer, int64_t model_vocab, bool include_specials)
    : NoiseSupport(
          [&] {
            const SpecialTokens& sp = tokenizer.specials();
            std::vector<int64_t> ids;
            for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
              const bool special = tokenizer.is_special(id);
              const bool never = id == sp.pad || id == sp.mask;
              if (never) continue;
              if (!special || include_specials || id == sp.eos) ids.push_back(id);
            }
            return ids;
          }(),
          model_vocab) {}

NoiseSupport::NoiseSupport(std::vector<int64_t> ids, int64_t model_vocab)
    : ids_(std::move(ids)), model_vocab_(model_vocab) {
  if (ids_.size() < 2) throw InputError("the diffusion noise support needs at least two ids");
  mask_cpu_ = torch::zeros({model_vocab_}, torch::kBool);
  for (int64_t id : ids_) {
    if (id < 0 || id >= model_vocab_)
      throw InputError(fmt::format("noise support id {} is outside the model vocabulary of {}", id, model_vocab_));
    mask_cpu_[id] = true;
  }
  ids_cpu_ = torch::tensor(ids_, torch::kLong);
}

// Asked for per vocabulary chunk of a loss: a blocking upload would wait for the device every time.
torch::Tensor NoiseSupport::member_mask(torch::Device device) const { return to_device_async(mask_cpu_, device); }

torch::Tensor NoiseSupport::restrict_logits(const torch::Tensor& logits) const {
  if (size() == model_vocab_) return logits;
  return logits.masked_fill(~member_mask(logits.device()), -std::numeric_limits<double>::infinity());
}

torch::Tensor NoiseSupport::sample_uniform(const torch::Tensor& like, at::Generator* generator) const {
  auto options = torch::TensorOptions().dtype(torch::kLong).device(like.device());
  auto index = generator ? torch::randint(size(), like.sizes(), *generator, options)
                         : torch::randint(size(), like.sizes(), options);
  return to_device_async(ids_cpu_, like.device()).index({index});
}

bool NoiseSupport::contains_all(const torch::Tensor& tokens) const {
  auto in_range = tokens.ge(0).logical_and(tokens.lt(model_vocab_)).all().item<bool>();
  return in_range && member_mask(tokens.device()).index({tokens.clamp(0, model_vocab_ - 1)}).all().item<bool>();
}

}  // namespace inkstone
