// `inkstone import hf SRC --out RUN_DIR`: a Hugging Face model folder (Qwen3, Qwen2, Llama, Mistral) into a run
// folder whose step-0 checkpoint `sample`, `eval`, `train --resume` and rl.init_checkpoint accept. Weights stream
// tensor by tensor from the shards into the checkpoint: peak memory is about one tensor, not the model.

#include <chrono>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/rng_state.h"
#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/memory_usage.h"
#include "dataset/prompt_format.h"
#include "dataset/tokenizer.h"
#include "interop/hf_config.h"
#include "interop/hf_tokenizer_files.h"
#include "interop/hf_weights.h"
#include "tools/commands.h"

namespace inkstone::cli {
namespace {

namespace fs = std::filesystem;

struct ImportOptions {
  std::string source;
  std::string out;
};

// Tensors HF files may carry that the backbone derives itself.
bool derivable(const std::string& hf_tensor) {
  return hf_tensor.size() >= 20 && hf_tensor.compare(hf_tensor.size() - 20, 20, ".rotary_emb.inv_freq") == 0;
}

// Every parameter the config implies, checked against the files' headers before anything is written: a missing
// tensor, another shape or an unsupported dtype is refused by name, and so is a tensor with no place in the model.
std::vector<PlannedTensor> plan_weights(const HfCheckpointFiles& files, const ModelConfig& model, int64_t vocab_size,
                                        const fs::path& source) {
  std::vector<PlannedTensor> planned;
  std::set<std::string> used;
  for (const ParameterShape& p : hf_parameter_shapes(model, vocab_size)) {
    const std::string hf = hf_name(p.name);
    const auto* info = files.find(hf);
    if (!info) throw InputError(fmt::format("{}: tensor '{}' is missing (config.json implies it)", source.string(), hf));
    if (info->shape != p.shape)
      throw InputError(fmt::format("{}: tensor '{}' has shape [{}], config.json implies [{}]",
                                   files.file_of(hf).string(), hf, fmt::join(info->shape, ", "),
                                   fmt::join(p.shape, ", ")));
    if (info->dtype != torch::kFloat32 && info->dtype != torch::kBFloat16 && info->dtype != torch::kFloat16)
      throw InputError(fmt::format("{}: tensor '{}' has dtype {} (F32, BF16 and F16 are read)",
                                   files.file_of(hf).string(), hf, c10::toString(info->dtype)));
    used.insert(hf);
    planned.push_back({p.name, torch::kFloat32, p.shape, [&files, hf] { return files.read(hf).to(torch::kFloat32); }});
  }
  for (const std::string& name : files.names()) {
    if (used.count(name) || derivable(name) || (model.tie_embeddings && name == "lm_head.weight")) continue;
    throw InputError(fmt::format("{}: tensor '{}' has no place in a {} model with this config.json",
                                 files.file_of(name).string(), name, choice_name(model.arch)));
  }
  return planned;
}

int import_hf(const ImportOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path source = o.source;
  const fs::path run_dir = o.out;
  if (!fs::is_directory(source)) throw InputError(fmt::format("{}: not a folder", source.string()));
  if (fs::exists(run_dir / "checkpoints") && !fs::is_empty(run_dir / "checkpoints"))
    throw InputError(fmt::format("'{}' already has checkpoints: choose another --out", run_dir.string()));

  const HfModelConfig hf = read_hf_config(source / "config.json");
  const ImportedTokenizer imported = import_hf_tokenizer(source);
  const auto tokenizer = tokenizer_from_json(imported.document, (source / "tokenizer.json").string());
  if (tokenizer->vocab_size() > hf.model.vocab_size)
    throw InputError(fmt::format("{}: vocab_size = {} is smaller than the tokenizer's {} ids",
                                 (source / "config.json").string(), hf.model.vocab_size, tokenizer->vocab_size()));

  Config config = default_config();
  config.run.name = run_dir.filename().string();
  config.model = hf.model;
  config.chat = imported.chat;
  config.data.seq_len = std::min(config.data.seq_len, config.model.max_seq_len);
  config = config_from_string(config_to_toml(config), (source / "config.json").string());  // validates the whole
  const PromptFormat format(config.chat, *tokenizer);  // stop tokens must be single tokens

  const HfCheckpointFiles files(source);
  CheckpointData checkpoint;
  checkpoint.step = 0;
  checkpoint.model_planned = plan_weights(files, config.model, config.model.vocab_size, source);
  checkpoint.state = {{"tokens_seen", 0},
                      {"elapsed_s", 0.0},
                      {"rng", capture_rng_state()},
                      {"objective", config.objective.name},
                      {"hf_import", {{"source", source.string()}, {"architecture", hf.architecture},
                                     {"dtype", hf.dtype}}}};
  checkpoint.config_toml = config_to_toml(config);
  checkpoint.tokenizer = tokenizer->to_json();

  fs::create_directories(run_dir);
  write_file_atomic(run_dir / "config.toml", checkpoint.config_toml);
  tokenizer->save(run_dir / "tokenizer.json");
  const auto written = save_checkpoint(run_dir, checkpoint, config.train.keep_checkpoints);

  int64_t parameters = 0;
  for (const auto& t : checkpoint.model_planned) parameters += static_cast<int64_t>(planned_bytes(t) / 4);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("imported {} ({}, {}, {:.2f} GB of weights): {} parameters, {} layers, d_model {}, vocab {}\n",
             source.string(), hf.architecture, hf.dtype.empty() ? "dtype unstated" : hf.dtype,
             static_cast<double>(files.total_bytes()) / 1e9, parameters, config.model.n_layers,
             config.model.d_model, config.model.vocab_size);
  fmt::print("tokenizer: {} ids, eos {}, {}; prompts start with {}, end ids {}\n", tokenizer->vocab_size(),
             tokenizer->specials().eos, imported.template_note, choice_name(config.chat.prompt_start),
             fmt::join(format.end_ids(), " "));
  fmt::print("wrote {} (fp32) in {:.1f} s, peak resident memory {:.2f} GiB\n", written.string(), seconds,
             peak_resident_mib() / 1024.0);
  fmt::print("sample: inkstone sample --run-dir {} --prompt \"...\"\n", run_dir.string());
  return 0;
}

}  // namespace

void add_import_command(CLI::App& app, Action& action) {
  auto options = std::make_shared<ImportOptions>();
  auto* cmd = app.add_subcommand("import", "Import a published checkpoint into a run folder");
  cmd->require_subcommand(1);
  auto* hf = cmd->add_subcommand("hf", "A Hugging Face model folder (Qwen3, Qwen2, Llama, Mistral; safetensors)");
  hf->add_option("source", options->source, "Folder with config.json, safetensors weights and tokenizer.json")
      ->required();
  hf->add_option("--out", options->out, "New run folder")->required();
  hf->callback([options, &action] { action = [options] { return import_hf(*options); }; });
}

}  // namespace inkstone::cli
