// Hugging Face config.json of the decoder families inkstone's backbone can express exactly (Qwen3, Qwen2, Llama,
// Mistral), read into a ModelConfig and written back from one (docs/interop.md).
#pragma once
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "config/config.h"

namespace inkstone {

struct HfModelConfig {
  std::string architecture;  // Qwen3ForCausalLM, ...
  ModelConfig model;         // model.arch is the family: qwen3 | qwen2 | llama | mistral
  std::string dtype;         // the checkpoint's torch dtype name (bfloat16, float16, float32); empty if unstated
};

// Reads config.json exactly; a setting the backbone cannot reproduce (another architecture or activation, a
// sliding window in use, a RoPE type other than default / linear / llama3, MLP biases, quantisation) is an
// InputError of one line naming the file and the key.
HfModelConfig read_hf_config(const std::filesystem::path& config_json);

// The HF architecture a model exports as; an InputError names the first feature HF has no equivalent for
// (routing, x-widths, short conv, MoE, hidden streams, time conditioning, QKV conv) or a family mismatch.
std::string hf_architecture_for(const ModelConfig& model);

// config.json for `model` (vocab_size is the model's), weights stored in `torch_dtype`; special ids are -1 when
// absent. A bidirectional model (causal = false) records its objective and attention under "inkstone": the
// weights load in transformers, but sampling it needs the objective's denoiser (docs/interop.md).
nlohmann::json hf_config_json(const ModelConfig& model, int64_t vocab_size, const std::string& torch_dtype,
                              int64_t bos_id, const std::vector<int32_t>& eos_ids, int64_t pad_id,
                              const std::string& objective, bool causal);

// "bfloat16" | "float16" | "float32" <-> the scalar type; an InputError for another name.
torch::ScalarType hf_dtype(const std::string& name, const std::string& where);

}  // namespace inkstone
