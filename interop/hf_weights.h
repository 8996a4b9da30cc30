// Tensor names and files of Hugging Face causal-LM checkpoints: the name map to inkstone's parameters, the
// parameter list a config implies, and sharded reading and writing one tensor at a time (docs/interop.md).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "config/config.h"

namespace inkstone {

struct ParameterShape {
  std::string name;  // inkstone's, e.g. blocks.3.attn.q_proj.weight
  std::vector<int64_t> shape;
};

// Every parameter of an exportable model (hf_architecture_for accepts it), in the model's order, without building
// the model (an 8B model would need 32 GB in fp32 just to learn its shapes).
std::vector<ParameterShape> hf_parameter_shapes(const ModelConfig& model, int64_t vocab_size);

// model.layers.3.self_attn.q_proj.weight <-> blocks.3.attn.q_proj.weight, model.embed_tokens.weight <->
// embed.weight, lm_head.weight <-> head.weight, and the norms; hf_name throws std::logic_error for a parameter
// outside the map.
std::string hf_name(const std::string& inkstone_name);

// The weights of a Hugging Face model folder: model.safetensors, or the shards model.safetensors.index.json names.
// Opening reads only the headers; a missing shard or a tensor the index names but its shard lacks is an
// InputError naming the file.
class HfCheckpointFiles {
 public:
  explicit HfCheckpointFiles(const std::filesystem::path& folder);
  // nullptr when no file holds the tensor.
  const SafetensorsReader::TensorInfo* find(const std::string& hf_name) const;
  // The file that holds it (for messages).
  const std::filesystem::path& file_of(const std::string& hf_name) const;
  torch::Tensor read(const std::string& hf_name) const;
  std::vector<std::string> names() const;
  uint64_t total_bytes() const;

 private:
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, const SafetensorsReader*> where_;
};

// Writes `tensors` (HF names) as model.safetensors when they fit one shard, else as model-0000K-of-0000N.safetensors
// with model.safetensors.index.json; tensors keep their order and a shard is closed before it would pass
// `shard_bytes`. Each tensor is produced when its shard is written.
void write_hf_shards(const std::filesystem::path& folder, const std::vector<PlannedTensor>& tensors,
                     uint64_t shard_bytes);

}  // namespace inkstone
