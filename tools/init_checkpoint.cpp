#include "tools/init_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "checkpoint/module_weights.h"
#include "config/config_schema.h"
#include "core/errors.h"
#include "models/lora.h"
#include "objectives/objective.h"
#include "tools/run_setup.h"

namespace inkstone::cli {
namespace {

const char* mask_name(MaskMode mask) { return mask == MaskMode::causal ? "causal" : "bidirectional"; }

// What the change of a key that may differ means for the weights, for the run header.
std::string change_note(const std::string& key) {
  if (key == "time_conditioning") return "new adaLN-Zero time-conditioning weights, initialised as configured";
  if (key == "tie_embeddings") return "an output head of its own, starting as a copy of the tied embedding";
  return "no weight changes";
}

// LoRA settings say how this run trains (models/lora.h), not what the checkpoint is: never adopted, never compared.
bool lora_key(const std::string& model_key) { return model_key.rfind("lora_", 0) == 0; }

// The checkpoint's description, read for config key `key` (its value is `path`).
InitialCheckpoint read_description(const std::string& key, const std::string& path) {
  if (!std::filesystem::exists(path))
    throw InputError(fmt::format("{} = '{}' does not exist (a run, checkpoint or `import hf` folder)", key, path));
  InitialCheckpoint initial;
  initial.key = key;
  initial.checkpoint = load_checkpoint(path, CheckpointParts::description);
  initial.config = config_from_string(initial.checkpoint.config_toml, path + "/config.toml");
  initial.tokenizer = tokenizer_from_json(initial.checkpoint.tokenizer, path + "/tokenizer.json");
  check_trained_objective(initial.checkpoint, initial.config);
  return initial;
}

}  // namespace

bool may_differ_from_initial_checkpoint(const std::string& model_key) {
  static const std::set<std::string> keys = {
      "max_seq_len",          "rope_theta",          "rope_scaling",        "rope_scaling_factor",
      "rope_low_freq_factor", "rope_high_freq_factor", "rope_original_max_len", "init",
      "init_std",             "init_gamma",          "init_gamma_embedding", "init_gamma_attention",
      "init_gamma_mlp",       "moe_aux_loss_coef",   "moe_z_loss_coef",     "moe_bias_update_rate",
      "time_conditioning",    "cond_dim",            "tie_embeddings"};
  return keys.count(model_key) > 0;
}

InitialCheckpoint adopt_initial_checkpoint(Config& config, const std::set<std::string>& given,
                                           const Tokenizer& data_tokenizer) {
  const std::string& path = config.train.init_checkpoint;
  InitialCheckpoint initial = read_description("train.init_checkpoint", path);
  const auto& tokenizer = initial.tokenizer;
  if (tokenizer->fingerprint() != data_tokenizer.fingerprint())
    throw InputError(fmt::format("train.init_checkpoint '{}' was trained with another tokenizer ({}, {} ids) than "
                                 "data.path '{}' is prepared with ({}, {} ids): prepare the data with the "
                                 "checkpoint's tokenizer (inkstone data prepare --tokenizer {})",
                                 path, tokenizer->kind(), tokenizer->vocab_size(), config.data.path,
                                 data_tokenizer.kind(), data_tokenizer.vocab_size(), path));

  for (const FieldSpec& field : config_schema()) {
    if (field.section != "model" || lora_key(field.key)) continue;
    const std::string wanted = field_to_toml(config, field), trained = field_to_toml(initial.config, field);
    if (wanted == trained) continue;
    if (!given.count(field.name())) {
      apply_override(config, field.name() + "=" + trained);
    } else if (may_differ_from_initial_checkpoint(field.key)) {
      initial.notes.push_back(
          fmt::format("{} = {} (the checkpoint's: {}): {}", field.name(), wanted, trained, change_note(field.key)));
    } else {
      throw InputError(fmt::format("{} = {} here but {} in train.init_checkpoint '{}': a run started from a checkpoint "
                                   "keeps its architecture (remove the key to adopt it)",
                                   field.name(), wanted, trained, path));
    }
  }
  config = config_from_string(config_to_toml(config), path + " adopted into the run's config");

  const MaskMode trained_mask = make_objective(initial.config, *tokenizer)->needs().mask;
  const MaskMode mask = make_objective(config, *tokenizer)->needs().mask;
  if (trained_mask != mask)
    initial.notes.push_back(fmt::format("attention: {} as trained ({}), {} here ({})", mask_name(trained_mask),
                                        initial.config.objective.name, mask_name(mask), config.objective.name));
  return initial;
}

InitialCheckpoint adopt_initial_policy(Config& config) {
  const std::string& path = config.rl.init_checkpoint;
  if (path.empty())
    throw InputError(fmt::format("objective '{}' post-trains a pretrained model: set rl.init_checkpoint",
                                 config.objective.name));
  InitialCheckpoint initial = read_description("rl.init_checkpoint", path);
  // The policy is the model as its objective trained it: decoded left to right, or denoised (rl.policy).
  const Config& trained = initial.config;
  const std::string trained_by = objective_batch_kind(trained.objective.name) == BatchKind::rollouts
                                     ? policy_objective_name(trained)  // an RL run's own policy
                                     : trained.objective.name;
  if (!config.rl.policy.empty() && config.rl.policy != trained_by)
    throw InputError(fmt::format("rl.policy = '{}' but rl.init_checkpoint '{}' was trained by objective '{}': leave "
                                 "rl.policy unset, it is read from the checkpoint",
                                 config.rl.policy, path, trained_by));
  config.rl.policy = trained_by;
  config.diffusion = initial.config.diffusion;  // the noise the policy was trained with is the one it denoises
  const ModelConfig run_model = config.model;
  config.model = initial.config.model;
  config.model.lora_rank = run_model.lora_rank;
  config.model.lora_alpha = run_model.lora_alpha;
  config.model.lora_targets = run_model.lora_targets;
  config.data = initial.config.data;
  const ChatConfig defaults = default_config().chat;
  const ChatConfig& chat = config.chat;
  if (chat.format == defaults.format && chat.system == defaults.system && chat.prompt_start == defaults.prompt_start &&
      chat.stop_tokens == defaults.stop_tokens)
    config.chat = initial.config.chat;
  config = config_from_string(config_to_toml(config), path + " adopted into the run's config");
  return initial;
}

std::vector<std::string> load_initial_weights(LanguageModelImpl& model, const InitialCheckpoint& initial) {
  const std::string path = initial.checkpoint.folder.string();
  const NamedTensors weights = load_checkpoint(initial.checkpoint.folder, CheckpointParts::model).model;
  std::map<std::string, torch::Tensor> unused(weights.begin(), weights.end());
  // A LoRA checkpoint starts a run as its merged model.
  const size_t before_merge = unused.size();
  merge_lora_adapters(unused, initial.config.model);
  const bool merged = unused.size() != before_merge;
  NamedTensors present;
  std::vector<std::string> fresh;
  const bool lora = model.config().lora_rank > 0;
  for (const auto& item : model.named_parameters()) {
    auto it = unused.find(item.key());
    if (it == unused.end()) {
      if (!lora || !item.value().requires_grad()) fresh.push_back(item.key());  // the adapters are LoRA's own
      continue;
    }
    present.emplace_back(it->first, it->second);
    unused.erase(it);
  }
  if (!unused.empty())
    throw InputError(fmt::format("{} '{}': weight '{}' has no place in this model", initial.key, path,
                                 unused.begin()->first));
  // Untied from the embedding, the head starts as that embedding, so the logits stay the checkpoint's.
  const auto head = std::find(fresh.begin(), fresh.end(), "head.weight");
  const auto embedding =
      std::find_if(present.begin(), present.end(), [](const auto& w) { return w.first == "embed.weight"; });
  if (head != fresh.end() && embedding != present.end()) {
    present.emplace_back("head.weight", embedding->second);
    fresh.erase(head);
  }
  // Frozen, a new weight would keep its initialisation for good (a zero adaLN-Zero modulation, a random time embedding).
  if (lora && !fresh.empty())
    throw InputError(fmt::format("model.lora_rank = {} freezes every weight but the adapters, and {} '{}' has no '{}' "
                                 "(a weight new in this architecture) to freeze: make the change without LoRA first",
                                 model.config().lora_rank, initial.key, path, fresh.front()));
  load_module_weights(model, present, path, /*keep_missing=*/true);
  std::vector<std::string> notes;
  if (merged) notes.push_back("the checkpoint's LoRA adapters merged into its weights");
  if (const ModelConfig& c = model.config(); c.lora_rank > 0)
    notes.push_back(fmt::format("LoRA: rank-{} adapters (alpha {}) on {}; every other weight frozen", c.lora_rank,
                                c.lora_alpha, c.lora_targets.empty() ? "every projection" : fmt::format("{}", fmt::join(c.lora_targets, ", "))));
  if (!fresh.empty())
    notes.push_back(fmt::format("{} new weight tensor(s) initialised as configured: {}{}", fresh.size(),
                                fmt::join(fresh.begin(), fresh.begin() + std::min<size_t>(fresh.size(), 3), ", "),
                                fresh.size() > 3 ? ", ..." : ""));
  return notes;
}

}  // namespace inkstone::cli
