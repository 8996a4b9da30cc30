#include "interop/hf_weights.h"

#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/input_file.h"
#include "models/model_dims.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// inkstone's block-level module names and HF's, in both directions.
const std::vector<std::pair<std::string, std::string>> kBlockParts = {
    {"attn_norm.", "input_layernorm."}, {"mlp_norm.", "post_attention_layernorm."}, {"attn.", "self_attn."},
    {"mlp.", "mlp."}};
const std::map<std::string, std::string> kTopLevel = {
    {"embed.weight", "model.embed_tokens.weight"}, {"final_norm.weight", "model.norm.weight"},
    {"head.weight", "lm_head.weight"}};

json read_json(const fs::path& path) {
  std::ifstream in = open_input_file(path, "JSON file");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON (error at byte {})", path.string(), e.byte));
  }
}

}  // namespace

std::vector<ParameterShape> hf_parameter_shapes(const ModelConfig& m, int64_t vocab_size) {
  const int64_t d = m.d_model, h = resolved_head_dim(m), ffn = resolved_ffn_dim(m);
  const int64_t q_width = m.n_heads * h, kv_width = m.n_kv_heads * h;
  std::vector<ParameterShape> shapes = {{"embed.weight", {vocab_size, d}}};
  const bool qkv_bias = m.attention_bias != AttentionBias::none;
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string block = fmt::format("blocks.{}.", i);
    const auto add = [&](const std::string& name, std::vector<int64_t> shape) {
      shapes.push_back({block + name, std::move(shape)});
    };
    add("attn_norm.weight", {d});
    add("attn.q_proj.weight", {q_width, d});
    if (qkv_bias) add("attn.q_proj.bias", {q_width});
    add("attn.k_proj.weight", {kv_width, d});
    if (qkv_bias) add("attn.k_proj.bias", {kv_width});
    add("attn.v_proj.weight", {kv_width, d});
    if (qkv_bias) add("attn.v_proj.bias", {kv_width});
    add("attn.o_proj.weight", {d, q_width});
    if (m.attention_bias == AttentionBias::all) add("attn.o_proj.bias", {d});
    if (m.qk_norm) {
      add("attn.q_norm.weight", {h});
      add("attn.k_norm.weight", {h});
    }
    add("mlp_norm.weight", {d});
    add("mlp.gate_proj.weight", {ffn, d});
    add("mlp.up_proj.weight", {ffn, d});
    add("mlp.down_proj.weight", {d, ffn});
  }
  shapes.push_back({"final_norm.weight", {d}});
  if (!m.tie_embeddings) shapes.push_back({"head.weight", {vocab_size, d}});
  return shapes;
}

std::string hf_name(const std::string& name) {
  const auto top = kTopLevel.find(name);
  if (top != kTopLevel.end()) return top->second;
  if (name.rfind("blocks.", 0) == 0) {
    const size_t dot = name.find('.', 7);
    const std::string layer = name.substr(7, dot - 7);
    const std::string rest = name.substr(dot + 1);
    for (const auto& [ours, theirs] : kBlockParts)
      if (rest.rfind(ours, 0) == 0) return "model.layers." + layer + "." + theirs + rest.substr(ours.size());
  }
  throw std::logic_error("no Hugging Face name for parameter " + name);
}

HfCheckpointFiles::HfCheckpointFiles(const fs::path& folder) {
  const fs::path index_path = folder / "model.safetensors.index.json";
  const fs::path single = folder / "model.safetensors";
  if (fs::exists(index_path)) {
    const json index = read_json(index_path);
    if (!index.contains("weight_map") || !index["weight_map"].is_object())
      throw InputError(fmt::format("{}: has no 'weight_map' object", index_path.string()));
    std::map<std::string, const SafetensorsReader*> opened;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string())
        throw InputError(fmt::format("{}: weight_map entry '{}' is not a file name", index_path.string(), tensor));
      const std::string name = file.get<std::string>();
      if (name.find('/') != std::string::npos || name.rfind("..", 0) == 0)
        throw InputError(fmt::format("{}: shard name '{}' leaves the folder", index_path.string(), name));
      if (!opened.count(name)) {
        if (!fs::exists(folder / name))
          throw InputError(fmt::format("{}: shard '{}' named by {} is missing", (folder / name).string(), name,
                                       index_path.filename().string()));
        files_.push_back(std::make_unique<SafetensorsReader>(folder / name));
        opened[name] = files_.back().get();
      }
      if (!opened[name]->find(tensor))
        throw InputError(fmt::format("{}: has no tensor '{}', which {} places there", (folder / name).string(), tensor,
                                     index_path.filename().string()));
      where_[tensor] = opened[name];
    }
  } else if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsReader>(single));
    for (const auto& info : files_.back()->tensors()) where_[info.name] = files_.back().get();
  } else {
    throw InputError(fmt::format("{}: has neither model.safetensors nor model.safetensors.index.json "
                                 "(pytorch_model.bin is not read: convert it to safetensors)",
                                 folder.string()));
  }
}

const SafetensorsReader::TensorInfo* HfCheckpointFiles::find(const std::string& name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? nullptr : it->second->find(name);
}

const fs::path& HfCheckpointFiles::file_of(const std::string& name) const { return where_.at(name)->path(); }

torch::Tensor HfCheckpointFiles::read(const std::string& name) const { return where_.at(name)->read(name); }

std::vector<std::string> HfCheckpointFiles::names() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : where_) names.push_back(name);
  return names;
}

uint64_t HfCheckpointFiles::total_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [name, file] : where_) {
    const auto* info = file->find(name);
    bytes += info->end - info->begin;
  }
  return bytes;
}

void write_hf_shards(const fs::path& folder, const std::vector<PlannedTensor>& tensors, uint64_t shard_bytes) {
  std::vector<std::vector<PlannedTensor>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& t : tensors) {
    const uint64_t bytes = planned_bytes(t);
    if (in_shard > 0 && in_shard + bytes > shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += bytes;
    total += bytes;
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (shards.size() == 1) {
    write_safetensors_streamed(folder / "model.safetensors", shards[0], metadata);
    return;
  }
  json weight_map = json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
    for (const auto& t : shards[k]) weight_map[t.name] = file;
    write_safetensors_streamed(folder / file, shards[k], metadata);
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomic(folder / "model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace inkstone
