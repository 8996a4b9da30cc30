#include "interop/hf_config.h"

#include <fstream>
#include <map>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/json_error.h"
#include "models/block_registry.h"
#include "models/model_dims.h"

namespace inkstone {
namespace {

using nlohmann::json;

struct Family {
  const char* architecture;
  const char* model_type;
  Architecture arch;  // ModelConfig::arch
  bool qk_norm;
};

// What inkstone's attention reproduces per family: Qwen3 normalises q and k per head, Qwen2 always has q/k/v biases.
constexpr Family kFamilies[] = {{"Qwen3ForCausalLM", "qwen3", Architecture::qwen3, true},
                                {"Qwen2ForCausalLM", "qwen2", Architecture::qwen2, false},
                                {"LlamaForCausalLM", "llama", Architecture::llama, false},
                                {"MistralForCausalLM", "mistral", Architecture::mistral, false}};

// Reads config.json's keys with one-line errors that name the file and the key.
class ConfigReader {
 public:
  ConfigReader(const std::filesystem::path& path) : path_(path.string()) {
    std::ifstream in = open_input_file(path, "config.json");
    try {
      doc_ = json::parse(in);
    } catch (const json::parse_error& e) {
      fail(fmt::format("not valid JSON (error at byte {})", e.byte));
    }
    if (!doc_.is_object()) fail("not a JSON object");
  }

  [[noreturn]] void fail(const std::string& what) const { throw InputError(fmt::format("{}: {}", path_, what)); }

  const json& doc() const { return doc_; }
  bool has(const char* key) const { return doc_.contains(key) && !doc_[key].is_null(); }

  int64_t integer(const char* key) const {
    if (!has(key)) fail(fmt::format("'{}' is missing", key));
    if (!doc_[key].is_number_integer() || doc_[key].get<int64_t>() <= 0)
      fail(fmt::format("'{}' = {} is not a positive integer", key, doc_[key].dump()));
    return doc_[key].get<int64_t>();
  }
  int64_t integer_or(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }

  double number(const json& object, const char* key, const std::string& where) const {
    if (!object.contains(key) || !object[key].is_number())
      fail(fmt::format("'{}{}' is missing or not a number", where, key));
    return object[key].get<double>();
  }
  double number_or(const char* key, double fallback) const { return has(key) ? number(doc_, key, "") : fallback; }

  bool flag_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!doc_[key].is_boolean()) fail(fmt::format("'{}' = {} is not true or false", key, doc_[key].dump()));
    return doc_[key].get<bool>();
  }

  std::string text_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!doc_[key].is_string()) fail(fmt::format("'{}' = {} is not a string", key, doc_[key].dump()));
    return doc_[key].get<std::string>();
  }

 private:
  std::string path_;
  json doc_;
};

const Family& family_of(const ConfigReader& r) {
  const json& archs = json_member(r.doc(), "architectures", json_null());
  if (!archs.is_array() || archs.size() != 1 || !archs[0].is_string())
    r.fail("'architectures' must list exactly one architecture");
  const std::string name = archs[0].get<std::string>();
  for (const Family& f : kFamilies)
    if (name == f.architecture) return f;
  r.fail(fmt::format("architectures = [\"{}\"] is not supported (Qwen3ForCausalLM, Qwen2ForCausalLM, "
                     "LlamaForCausalLM, MistralForCausalLM)",
                     name));
}

// A sliding window changes which keys a query sees; only windows that never bind are accepted.
void refuse_sliding_window(const ConfigReader& r, const Family& family, int64_t max_positions) {
  const bool qwen = family.arch == Architecture::qwen3 || family.arch == Architecture::qwen2;
  if (qwen && r.flag_or("use_sliding_window", false)) r.fail("use_sliding_window = true is not supported");
  if (!qwen && r.has("sliding_window") && r.integer("sliding_window") < max_positions)
    r.fail(fmt::format("sliding_window = {} is in use (below max_position_embeddings = {}) and not supported",
                       r.integer("sliding_window"), max_positions));
  if (r.has("layer_types"))
    for (const json& type : r.doc()["layer_types"])
      if (type != "full_attention") r.fail(fmt::format("layer_types holds {}; only full_attention is supported", type.dump()));
}

// RoPE: legacy rope_theta + rope_scaling (transformers 4) or rope_parameters (transformers 5).
void read_rope(const ConfigReader& r, ModelConfig& m) {
  const bool v5 = r.has("rope_parameters");
  const json& scaling = v5 ? r.doc()["rope_parameters"] : json_member(r.doc(), "rope_scaling", json_null());
  const std::string where = v5 ? "rope_parameters." : "rope_scaling.";
  m.rope_theta = v5 ? r.number(scaling, "rope_theta", where) : r.number_or("rope_theta", 10000.0);
  if (scaling.is_null()) return;
  if (!scaling.is_object()) r.fail(fmt::format("'{}' is not an object", where.substr(0, where.size() - 1)));
  const json type = scaling.contains("rope_type") ? scaling["rope_type"] : scaling.value("type", json("default"));
  if (type == "default") return;
  if (type == "linear") {
    m.rope_scaling = RopeScalingKind::linear;
    m.rope_scaling_factor = r.number(scaling, "factor", where);
  } else if (type == "llama3") {
    m.rope_scaling = RopeScalingKind::llama3;
    m.rope_scaling_factor = r.number(scaling, "factor", where);
    m.rope_low_freq_factor = r.number(scaling, "low_freq_factor", where);
    m.rope_high_freq_factor = r.number(scaling, "high_freq_factor", where);
    m.rope_original_max_len = static_cast<int64_t>(r.number(scaling, "original_max_position_embeddings", where));
  } else {
    r.fail(fmt::format("{}rope_type = {} is not supported (default, linear, llama3)", where, type.dump()));
  }
  if (m.rope_scaling_factor < 1) r.fail(fmt::format("{}factor = {} is below 1", where, m.rope_scaling_factor));
  if (m.rope_scaling == RopeScalingKind::llama3 && m.rope_high_freq_factor <= m.rope_low_freq_factor)
    r.fail(fmt::format("{}high_freq_factor must exceed low_freq_factor", where));
}

}  // namespace

torch::ScalarType hf_dtype(const std::string& name, const std::string& where) {
  static const std::map<std::string, torch::ScalarType> kTypes = {
      {"bfloat16", torch::kBFloat16}, {"float16", torch::kFloat16}, {"float32", torch::kFloat32}};
  const auto it = kTypes.find(name);
  if (it == kTypes.end())
    throw InputError(fmt::format("{}: dtype '{}' is not supported (bfloat16, float16, float32)", where, name));
  return it->second;
}

HfModelConfig read_hf_config(const std::filesystem::path& config_json) {
  const ConfigReader r(config_json);
  const Family& family = family_of(r);
  if (r.text_or("model_type", family.model_type) != family.model_type)
    r.fail(fmt::format("model_type = \"{}\" does not match architectures ({})", r.text_or("model_type", ""),
                       family.architecture));
  for (const char* key : {"quantization_config", "auto_map"})
    if (r.has(key)) r.fail(fmt::format("'{}' is not supported", key));
  if (r.text_or("hidden_act", "silu") != "silu")
    r.fail(fmt::format("hidden_act = \"{}\" is not supported (silu)", r.text_or("hidden_act", "")));
  if (r.flag_or("mlp_bias", false)) r.fail("mlp_bias = true is not supported");

  HfModelConfig out;
  out.architecture = family.architecture;
  out.dtype = r.text_or("dtype", r.text_or("torch_dtype", ""));
  ModelConfig& m = out.model;
  m = default_config().model;
  m.arch = family.arch;
  m.vocab_size = r.integer("vocab_size");
  m.d_model = r.integer("hidden_size");
  m.ffn_dim = r.integer("intermediate_size");
  m.n_layers = r.integer("num_hidden_layers");
  m.n_heads = r.integer("num_attention_heads");
  m.n_kv_heads = r.integer_or("num_key_value_heads", m.n_heads);
  if (!r.has("head_dim") && m.d_model % m.n_heads != 0)
    r.fail(fmt::format("hidden_size = {} is not divisible by num_attention_heads = {} and head_dim is absent",
                       m.d_model, m.n_heads));
  m.head_dim = r.integer_or("head_dim", m.d_model / m.n_heads);
  if (m.n_heads % m.n_kv_heads != 0)
    r.fail(fmt::format("num_key_value_heads = {} does not divide num_attention_heads = {}", m.n_kv_heads, m.n_heads));
  if (m.head_dim % 2 != 0) r.fail(fmt::format("head_dim = {} is odd; RoPE needs an even one", m.head_dim));
  m.max_seq_len = r.integer("max_position_embeddings");
  m.norm_eps = r.number_or("rms_norm_eps", 1e-6);
  m.tie_embeddings = r.flag_or("tie_word_embeddings", false);
  m.qk_norm = family.qk_norm;
  if (m.arch == Architecture::qwen2) {
    m.attention_bias = AttentionBias::qkv;
  } else {
    m.attention_bias = r.flag_or("attention_bias", false) ? AttentionBias::all : AttentionBias::none;
  }
  refuse_sliding_window(r, family, m.max_seq_len);
  read_rope(r, m);
  return out;
}

std::string hf_architecture_for(const ModelConfig& m) {
  const auto refuse = [](const std::string& feature) {
    throw InputError(fmt::format("{} has no Hugging Face equivalent; such a model cannot be exported", feature));
  };
  if (m.residual != ResidualMode::plain) refuse(fmt::format("model.residual = \"{}\"", choice_name(m.residual)));
  if (m.width_profile != WidthProfile::uniform) refuse(fmt::format("model.width_profile = \"{}\"", choice_name(m.width_profile)));
  // Each layer's parts say whether a Hugging Face architecture has them (models/block_registry.h).
  for (int64_t layer = 0; layer < m.n_layers; ++layer) {
    const TokenMixerKind& mixer = token_mixer_of(m, layer);
    if (!mixer.exportable_to_hf) refuse(fmt::format("model.mixer_pattern = \"{}\" ({})", m.mixer_pattern, mixer.description));
    const FeedForwardKind& ffn = feed_forward_of(m, layer);
    if (!ffn.exportable_to_hf) refuse(fmt::format("model.ffn_pattern = \"{}\" ({})", m.ffn_pattern, ffn.description));
  }
  if (m.hidden_streams > 1) refuse(fmt::format("model.hidden_streams = {}", m.hidden_streams));
  if (m.time_conditioning) refuse("model.time_conditioning");
  if (m.qkv_conv) refuse("model.qkv_conv");
  if (m.attention_sink) refuse("model.attention_sink (an off-by-one softmax)");
  for (const Family& f : kFamilies) {
    if (m.arch != f.arch) continue;
    if (m.qk_norm != f.qk_norm)
      throw InputError(fmt::format("model.arch = \"{}\" {} a q/k norm but model.qk_norm = {}", choice_name(m.arch),
                                   f.qk_norm ? "has" : "has no", m.qk_norm));
    const bool qwen2 = m.arch == Architecture::qwen2;
    if (qwen2 != (m.attention_bias == AttentionBias::qkv) || (m.arch == Architecture::mistral && m.attention_bias != AttentionBias::none))
      throw InputError(fmt::format("model.attention_bias = \"{}\" is not what {} has", choice_name(m.attention_bias),
                                   f.architecture));
    return f.architecture;
  }
  throw InputError(fmt::format("model.arch = \"{}\" has no Hugging Face architecture", choice_name(m.arch)));
}

json hf_config_json(const ModelConfig& m, int64_t vocab_size, const std::string& torch_dtype, int64_t bos_id,
                    const std::vector<int32_t>& eos_ids, int64_t pad_id, const std::string& objective,
                    bool causal) {
  const std::string architecture = hf_architecture_for(m);
  std::string model_type;
  for (const Family& f : kFamilies)
    if (architecture == f.architecture) model_type = f.model_type;
  const auto id_or_null = [](int64_t id) { return id >= 0 ? json(id) : json(); };
  json rope = {{"rope_type", "default"}};
  if (m.rope_scaling == RopeScalingKind::linear) rope = {{"rope_type", "linear"}, {"factor", m.rope_scaling_factor}};
  if (m.rope_scaling == RopeScalingKind::llama3)
    rope = {{"rope_type", "llama3"},
            {"factor", m.rope_scaling_factor},
            {"low_freq_factor", m.rope_low_freq_factor},
            {"high_freq_factor", m.rope_high_freq_factor},
            {"original_max_position_embeddings", m.rope_original_max_len}};
  json config = {{"architectures", {architecture}},
                 {"model_type", model_type},
                 {"vocab_size", vocab_size},
                 {"hidden_size", m.d_model},
                 {"intermediate_size", resolved_ffn_dim(m)},
                 {"num_hidden_layers", m.n_layers},
                 {"num_attention_heads", m.n_heads},
                 {"num_key_value_heads", m.n_kv_heads},
                 {"head_dim", resolved_head_dim(m)},
                 {"hidden_act", "silu"},
                 {"max_position_embeddings", m.max_seq_len},
                 {"rms_norm_eps", m.norm_eps},
                 {"tie_word_embeddings", m.tie_embeddings},
                 {"attention_dropout", 0.0},
                 {"use_cache", true},
                 {"torch_dtype", torch_dtype},
                 {"bos_token_id", id_or_null(bos_id)},
                 {"eos_token_id", eos_ids.size() == 1 ? json(eos_ids[0]) : json(eos_ids)},
                 {"pad_token_id", id_or_null(pad_id)}};
  // transformers 4 reads rope_theta / rope_scaling, transformers 5 rope_parameters: both are written.
  config["rope_theta"] = m.rope_theta;
  config["rope_scaling"] = m.rope_scaling == RopeScalingKind::none ? json() : rope;
  rope["rope_theta"] = m.rope_theta;
  config["rope_parameters"] = rope;
  if (model_type != "qwen2") config["attention_bias"] = m.attention_bias == AttentionBias::all;
  if (model_type == "llama") config["mlp_bias"] = false;
  if (model_type == "qwen2" || model_type == "qwen3") {
    config["use_sliding_window"] = false;
    config["max_window_layers"] = m.n_layers;
  }
  if (model_type != "llama") config["sliding_window"] = nullptr;
  if (!causal) config["inkstone"] = {{"objective", objective}, {"attention", "bidirectional"}};
  return config;
}

}  // namespace inkstone
