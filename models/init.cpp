#include "models/init.h"

#include <cmath>
#include <map>

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/errors.h"

namespace inkstone {
namespace {

// GPT-2 / Qwen3 style: every matrix N(0, init_std²), gains 1.
InitScheme normal_scheme(const ModelConfig& config) {
  const double std = config.init_std;
  return [std](const std::string&, torch::Tensor& param, ParamRole role) {
    switch (role) {
      case ParamRole::norm: param.fill_(1.0); break;
      case ParamRole::zero: param.zero_(); break;
      // PyTorch's Conv1d default U(±1/√fan_in), which LFM2 and Canon layers keep: N(0, 0.02²) taps would make
      // the short conv's product of three small factors vanish.
      case ParamRole::conv: {
        const double bound = 1.0 / std::sqrt(static_cast<double>(param.size(1)));
        param.uniform_(-bound, bound);
        break;
      }
      default: param.normal_(0.0, std); break;
    }
  };
}

// γ-initialisation (docs/backbones.md, "Gamma initialisation"; γ as in arXiv 2505.23013): every matrix N(0, σ²)
// with σ = fan_in^(−γ), so γ = 0.5 is LeCun-normal and σ follows the width at a fixed γ. Each group may override γ.
InitScheme gamma_scheme(const ModelConfig& config) {
  const auto or_global = [&](double group_gamma) { return group_gamma < 0 ? config.init_gamma : group_gamma; };
  const double embedding = or_global(config.init_gamma_embedding);
  const double attention = or_global(config.init_gamma_attention);
  const double mlp = or_global(config.init_gamma_mlp);
  const double other = config.init_gamma;
  return [=](const std::string&, torch::Tensor& param, ParamRole role) {
    if (role == ParamRole::norm) {
      param.fill_(1.0);
      return;
    }
    if (role == ParamRole::zero) {
      param.zero_();
      return;
    }
    const double gamma = role == ParamRole::embedding              ? embedding
                         : role == ParamRole::qk || role == ParamRole::vo ? attention
                         : role == ParamRole::mlp                   ? mlp
                                                                    : other;
    const auto fan_in = static_cast<double>(param.dim() >= 2 ? param.size(1) : param.size(0));
    param.normal_(0.0, std::pow(fan_in, -gamma));
  };
}

struct RegisteredScheme {
  std::function<InitScheme(const ModelConfig&)> make;
  bool follows_width;  // σ already scales with fan_in, so x-shaped widths need no correction
};

const std::map<std::string, RegisteredScheme>& schemes() {
  static const std::map<std::string, RegisteredScheme> registry = {
      {"normal", {normal_scheme, false}},
      {"gamma", {gamma_scheme, true}},
  };
  return registry;
}

const RegisteredScheme& registered_scheme(const ModelConfig& config) {
  const auto found = schemes().find(config.init);
  if (found == schemes().end()) {
    std::string known;
    for (const auto& [name, scheme] : schemes()) known += (known.empty() ? "" : ", ") + name;
    throw InputError(fmt::format("model.init = '{}' is not a known scheme ({})", config.init, known));
  }
  return found->second;
}

}  // namespace

std::string to_string(ParamRole role) {
  switch (role) {
    case ParamRole::embedding: return "embedding";
    case ParamRole::qk: return "qk";
    case ParamRole::vo: return "vo";
    case ParamRole::mlp: return "mlp";
    case ParamRole::head: return "head";
    case ParamRole::norm: return "norm";
    case ParamRole::conv: return "conv";
    case ParamRole::conditioning: return "conditioning";
    case ParamRole::zero: return "zero";
  }
  return "?";
}

InitScheme make_init_scheme(const ModelConfig& config) { return registered_scheme(config).make(config); }

bool init_scheme_follows_width(const ModelConfig& config) { return registered_scheme(config).follows_width; }

}  // namespace inkstone
