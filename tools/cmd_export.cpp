// `inkstone export hf RUN_OR_CHECKPOINT --out DST [--dtype auto|bf16|fp16|fp32] [--shard-size 5GB]`: a Hugging
// Face model folder that transformers' AutoModelForCausalLM loads with the same logits. The folder appears whole
// or not at all (written beside DST, then renamed).
#include <unistd.h>

#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "checkpoint/checkpoint.h"
#include "core/atomic_file.h"
#include "core/errors.h"
#include "interop/hf_config.h"
#include "interop/hf_tokenizer_files.h"
#include "interop/hf_weights.h"
#include "models/lora.h"
#include "objectives/objective.h"
#include "tools/commands.h"

namespace inkstone::cli {
namespace {

namespace fs = std::filesystem;

struct ExportOptions {
  std::string source;
  std::string out;
  std::string dtype = "auto";
  std::string shard_size = "5GB";
};

// "5GB", "500MB", "2GiB", "123456" -> bytes.
uint64_t parse_size(const std::string& text) {
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}};
  for (const auto& [unit, scale] : kUnits) {
    if (text.size() <= unit.size() || text.compare(text.size() - unit.size(), unit.size(), unit) != 0) continue;
    try {
      size_t used = 0;
      const double value = std::stod(text.substr(0, text.size() - unit.size()), &used);
      if (used == text.size() - unit.size() && value > 0) return static_cast<uint64_t>(value * scale);
    } catch (const std::exception&) {
    }
    break;
  }
  try {
    size_t used = 0;
    const auto bytes = std::stoull(text, &used);
    if (used == text.size() && bytes > 0) return bytes;
  } catch (const std::exception&) {
  }
  throw InputError(fmt::format("--shard-size '{}' is not a size such as 5GB, 500MB or 2GiB", text));
}

// auto: the dtype the run was imported in (import -> export is then bitwise), else the dtype its weights trained
// in (run.param_dtype; exact either way).
std::string resolve_dtype(const std::string& option, const nlohmann::json& state, const Config& config) {
  static const std::map<std::string, std::string> kNames = {
      {"bf16", "bfloat16"}, {"fp16", "float16"}, {"fp32", "float32"}};
  if (option != "auto") return kNames.at(option);
  const std::string trained = kNames.at(choice_name(config.run.param_dtype));
  const auto imported = state.find("hf_import");
  if (imported == state.end() || !imported->is_object()) return trained;
  return imported->value("dtype", trained);
}

int export_hf(const ExportOptions& o) {
  const fs::path out = o.out;
  if (fs::exists(out) && !(fs::is_directory(out) && fs::is_empty(out)))
    throw InputError(fmt::format("'{}' already exists: choose another --out", out.string()));
  const uint64_t shard_bytes = parse_size(o.shard_size);
  const CheckpointData checkpoint = load_checkpoint(o.source, CheckpointParts::model);
  const Config config = config_from_string(checkpoint.config_toml, o.source + "/config.toml");
  const auto tokenizer = tokenizer_from_json(checkpoint.tokenizer, o.source + "/tokenizer.json");
  const std::string architecture = hf_architecture_for(config.model);
  const std::string dtype_name = resolve_dtype(o.dtype, checkpoint.state, config);
  const torch::ScalarType dtype = hf_dtype(dtype_name, o.source);
  const bool causal = make_policy_objective(config, *tokenizer)->needs().mask == MaskMode::causal;

  std::map<std::string, torch::Tensor> weights(checkpoint.model.begin(), checkpoint.model.end());
  merge_lora_adapters(weights, config.model);  // a LoRA run exports as its merged model
  const int64_t vocab_size = weights.count("embed.weight") ? weights["embed.weight"].size(0) : 0;
  std::vector<PlannedTensor> tensors;
  for (const ParameterShape& p : hf_parameter_shapes(config.model, vocab_size)) {
    const auto it = weights.find(p.name);
    if (it == weights.end() || it->second.sizes().vec() != p.shape)
      throw InputError(fmt::format("{}: the checkpoint's '{}' is missing or not of shape [{}]", o.source, p.name,
                                   fmt::join(p.shape, ", ")));
    const torch::Tensor tensor = it->second;
    tensors.push_back({hf_name(p.name), dtype, p.shape, [tensor, dtype] { return tensor.to(dtype); }});
    weights.erase(it);
  }
  if (!weights.empty())
    throw InputError(fmt::format("{}: parameter '{}' has no Hugging Face counterpart", o.source, weights.begin()->first));

  const ExportedTokenizer files = export_hf_tokenizer(*tokenizer, config.chat, config.model.max_seq_len);
  const nlohmann::json generation = files.generation_config;
  const auto id = [&](const char* key) { return generation[key].is_null() ? int64_t{-1} : generation[key].get<int64_t>(); };
  std::vector<int32_t> eos_ids;
  if (generation["eos_token_id"].is_array()) {
    eos_ids = generation["eos_token_id"].get<std::vector<int32_t>>();
  } else if (!generation["eos_token_id"].is_null()) {
    eos_ids = {generation["eos_token_id"].get<int32_t>()};
  }
  const nlohmann::json hf_config = hf_config_json(config.model, vocab_size, dtype_name, id("bos_token_id"), eos_ids,
                                                  id("pad_token_id"), config.objective.name, causal);

  const fs::path temp = out.parent_path() / fmt::format(".{}.tmp-{}", out.filename().string(), ::getpid());
  fs::remove_all(temp);
  fs::create_directories(temp);
  try {
    write_file_atomic(temp / "config.json", hf_config.dump(2) + "\n");
    write_file_atomic(temp / "generation_config.json", files.generation_config.dump(2) + "\n");
    write_file_atomic(temp / "tokenizer.json", files.tokenizer.dump(2) + "\n");
    write_file_atomic(temp / "tokenizer_config.json", files.tokenizer_config.dump(2) + "\n");
    write_hf_shards(temp, tensors, shard_bytes);
    if (fs::exists(out)) fs::remove(out);  // an empty folder
    fs::rename(temp, out);
    fsync_path(out.parent_path().empty() ? fs::path(".") : out.parent_path());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(temp, ignored);
    throw;
  }
  fmt::print("exported {} (step {}) as {} ({}) to {}: {} tensors{}\n", o.source, checkpoint.step, architecture,
             dtype_name, out.string(), tensors.size(),
             causal ? "" : fmt::format("; bidirectional {} model (config.json \"inkstone\" says so)", config.objective.name));
  return 0;
}

}  // namespace

void add_export_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<ExportOptions>();
  auto* cmd = app.add_subcommand("export", "Export a checkpoint in a published format");
  cmd->require_subcommand(1);
  auto* hf = cmd->add_subcommand("hf", "A Hugging Face model folder (config.json, safetensors shards, tokenizer)");
  hf->add_option("source", o->source, "Checkpoint folder, or a run folder (its newest checkpoint)")->required();
  hf->add_option("--out", o->out, "New folder")->required();
  hf->add_option("--dtype", o->dtype, "Weights dtype: auto (the imported one, else the trained one: run.param_dtype), bf16, fp16, fp32")
      ->check(CLI::IsMember({"auto", "bf16", "fp16", "fp32"}));
  hf->add_option("--shard-size", o->shard_size, "Largest shard, e.g. 5GB, 500MB (default 5GB)");
  hf->callback([o, &action] { action = [o] { return export_hf(*o); }; });
}

}  // namespace inkstone::cli
