// Wiring shared by the CLI's subcommands.
#include "tools/run_setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <ATen/Parallel.h>

#include "checkpoint/module_weights.h"
#include "core/errors.h"
#include "core/platform.h"
#include "models/moe.h"
#include "models/width_profile.h"

namespace inkstone::cli {

std::filesystem::path resolve_run_dir(const Config& config, const std::string& cli_run_dir) {
  if (!cli_run_dir.empty()) return cli_run_dir;
  if (!config.run.run_dir.empty()) return config.run.run_dir;
  return std::filesystem::path("runs") / config.run.name;
}

RunContext prepare_run(const Config& config, std::shared_ptr<const Tokenizer> tokenizer) {
  set_threads(config.run.threads);
  warn_if_reference_blas();
  torch::manual_seed(static_cast<uint64_t>(config.run.seed));
  RunContext ctx;
  ctx.device = resolve_device(choice_name(config.run.device));
  allow_tf32(config.run.tf32);
  ctx.tokenizer = tokenizer ? std::move(tokenizer) : load_run_tokenizer(config);
  return ctx;
}

namespace {

void require_prepared_folder(const DataFolder& folder) {
  if (!std::filesystem::is_directory(folder.path))
    throw InputError(fmt::format("{} = '{}' does not exist: prepare it first with `inkstone data prepare --out {}` "
                                 "(docs/cli.md, \"inkstone data prepare\")",
                                 folder.key, folder.path, folder.path));
  if (!std::filesystem::is_regular_file(std::filesystem::path(folder.path) / "tokenizer.json"))
    throw InputError(fmt::format("{} = '{}' holds no tokenizer.json: it is not a folder made by `inkstone data "
                                 "prepare`",
                                 folder.key, folder.path));
}

// The name a folder's validation figures carry: its last path component ("data/web/" -> "web").
std::string folder_name(const std::string& path) {
  auto normal = std::filesystem::path(path).lexically_normal();
  if (!normal.has_filename()) normal = normal.parent_path();
  return normal.filename().string();
}

}  // namespace

std::shared_ptr<const Tokenizer> load_run_tokenizer(const Config& config) {
  // A mixture's folders are each checked against this tokenizer when opened (open_training_data).
  const DataFolder folder = data_folders(config.data).front();
  const std::string tokenizer_spec = !config.data.tokenizer.empty() ? config.data.tokenizer : folder.path;
  if (tokenizer_spec.empty())
    throw InputError("data.path is empty: point it at a folder made by `inkstone data prepare`");
  // The data folder carries the tokenizer it was prepared with: a folder not prepared yet is said as such, with
  // the command that makes it, rather than as a tokenizer that cannot be found.
  if (config.data.tokenizer.empty()) require_prepared_folder(folder);
  return load_tokenizer(tokenizer_spec);
}

void check_conversation_settings(const Config& config, const ObjectiveNeeds& needs, const DataFolder& folder,
                                 const Manifest& manifest) {
  const std::string& path = folder.path;
  if (manifest.loss_mask && config.data.mode == WindowMode::pack && !config.data.document_mask)
    throw InputError(fmt::format("{} = '{}' holds conversations with loss masks: packed windows must keep them "
                                 "apart (set data.document_mask = true, or data.mode = \"pad\")",
                                 folder.key, path));
  if (!manifest.chat) return;
  const ChatRecord& chat = *manifest.chat;
  // Attention both ways would show a noised response the turns after it (docs/diffusion.md, "Fine-tuning on
  // conversations").
  if (needs.mask == MaskMode::bidirectional && chat.multi_response_conversations > 0)
    throw InputError(fmt::format("{} = '{}' holds {} conversations trained on several responses, whose later turns a "
                                 "bidirectional objective would see beside a noised earlier response: prepare it "
                                 "with `inkstone data prepare --format chat --split-turns`",
                                 folder.key, path, chat.multi_response_conversations));
  const ChatRecord run{choice_name(config.chat.format), config.chat.system, choice_name(config.chat.prompt_start)};
  const auto differs = [&](const char* key, const std::string& prepared, const std::string& here) {
    if (prepared != here)
      throw InputError(fmt::format("{} = '{}' renders conversations with chat.{} = '{}' but this run has '{}': "
                                   "set [chat] as the data was prepared (docs/training.md, \"Fine-tuning on "
                                   "conversations\"), so that prompts are rendered as the model was trained",
                                   folder.key, path, key, prepared, here));
  };
  differs("format", chat.format, run.format);
  differs("system", chat.system, run.system);
  differs("prompt_start", chat.prompt_start, run.prompt_start);
}

TrainingData open_training_data(const Config& config, const Tokenizer& tokenizer, const ObjectiveNeeds& needs,
                                int64_t rank) {
  auto options = [&](const std::string& split) {
    WindowLoaderOptions o;
    o.split = split;
    o.window_len = config.data.seq_len + needs.window_extra;
    o.mode = config.data.mode;
    o.seed = static_cast<uint64_t>(data_order_seed(config));
    o.expect_tokenizer(tokenizer);
    o.rank = rank;
    return o;
  };
  TrainingData data;
  std::set<std::string> names;
  for (const DataFolder& folder : data_folders(config.data)) {
    if (config.data.tokenizer.empty()) require_prepared_folder(folder);
    MixtureSource source;
    source.name = folder_name(folder.path);
    if (!names.insert(source.name).second)
      throw InputError(fmt::format("{} = '{}': another folder of data.mixture is also named '{}', which labels its "
                                   "validation figures; give the folders distinct names",
                                   folder.key, folder.path, source.name));
    source.weight = folder.weight;
    source.train = std::make_shared<WindowLoader>(folder.path, options("train"));
    source.val = std::make_shared<WindowLoader>(folder.path, options("val"));
    check_conversation_settings(config, needs, folder, source.train->manifest());
    data.sources.push_back(std::move(source));
  }
  if (data.sources.size() == 1) data.train = data.sources.front().train;
  else data.train = std::make_shared<WindowMixture>(data.sources);
  return data;
}

LanguageModel build_model_for(const Config& config, const Tokenizer& tokenizer, const torch::Device& device) {
  // fp32 weights, gradients and two Adam moments: 16 bytes a parameter, before any activation; 4 for the frozen
  // weights of LoRA (its adapters are a small share).
  const ModelConfig& m = config.model;
  const int64_t vocab = std::max<int64_t>(m.vocab_size, tokenizer.vocab_size());
  const double parameters = static_cast<double>(width_dependent_parameter_count(m, layer_widths(m))) +
                            static_cast<double>(vocab) * static_cast<double>(m.d_model) * (m.tie_embeddings ? 1 : 2);
  require_memory((m.lora_rank > 0 ? 4 : 16) * parameters, device,
                 fmt::format("training a model of about {:.3g} parameters (vocabulary {}, model.d_model {})",
                             parameters, vocab, m.d_model));
  return build_language_model(config.model, tokenizer.vocab_size());
}

// Residual routing, layer widths and the forward FLOPs per token at the training context.
void print_model_shape(const ModelConfig& m, const LanguageModelImpl& model, int64_t context) {
  const auto& widths = model.layer_widths();
  const auto [narrowest, widest] = std::minmax_element(widths.begin(), widths.end());
  const double mismatch = width_parameter_mismatch(m, widths);
  const std::string width_text =
      *narrowest == *widest
          ? fmt::format("width {}", *widest)
          : fmt::format("widths {} ({:+.2f}% parameters against uniform)", fmt::join(widths, " "), 100 * mismatch);
  if (std::abs(mismatch) > 0.005)
    fmt::print(stderr, "warning: the x-shaped widths miss the uniform parameter count by {:.2f}%; lower "
               "model.width_quantum for a closer match\n", 100 * mismatch);
  const std::string routing_text =
      m.residual == ResidualMode::plain ? "plain residual"
                            : fmt::format("residual {} ({} heads, {} routing parameters)", choice_name(m.residual),
                                          m.residual_heads, model.param_counts().routing);
  fmt::print("{}, {}, init {}; forward {:.2f} MFLOP/token at context {} (training about 3x)\n", routing_text,
             width_text, m.init, model.forward_flops_per_token(context) / 1e6, context);
}

void print_run_header(const Config& config, LanguageModel& model, const std::filesystem::path& run_dir,
                      torch::Device device) {
  const ParamCounts counts = model->param_counts();
  fmt::print("run {} -> {}\n", config.run.name, run_dir.string());
  fmt::print("model {}: {} parameters ({} embedding, {} non-embedding), {} layers, d_model {}\n",
             choice_name(config.model.arch), counts.total, counts.embedding, counts.non_embedding, config.model.n_layers,
             config.model.d_model);
  print_model_shape(config.model, *model, config.data.seq_len);
  if (config.model.hidden_streams > 1)
    fmt::print("hidden decoding: {} streams ({} slots per sequence), attention \"{}\", positions {}\n",
               config.model.hidden_streams, config.model.hidden_streams * config.data.seq_len,
               config.model.hidden_attention, choice_name(config.model.hidden_positions));
  if (const int64_t inactive = inactive_expert_parameters(*model); inactive > 0)
    fmt::print("mixture of experts: {} active parameters per token of {} ({} in unselected experts)\n",
               counts.total - inactive, counts.total, inactive);
  fmt::print("objective {}, device {}, precision {}, weights {}, threads {}, blas {}\n", config.objective.name,
             device.str(), choice_name(config.run.precision), choice_name(config.run.param_dtype),
             at::get_num_threads(), blas_library());
}

void check_trained_objective(const CheckpointData& checkpoint, const Config& config) {
  if (const auto trainer = checkpoint.state.find("objective");
      trainer != checkpoint.state.end() && trainer->is_string() && *trainer != config.objective.name)
    throw InputError(fmt::format("{}: config.toml names objective '{}' but state.json records that objective '{}' "
                                 "trained these weights",
                                 checkpoint.folder.string(), config.objective.name, trainer->get<std::string>()));
}

TrainedModel load_trained_model(const std::string& checkpoint_or_run_dir, const std::string& device) {
  CheckpointData checkpoint = load_checkpoint(checkpoint_or_run_dir, CheckpointParts::model);
  TrainedModel trained;
  trained.config = config_from_string(checkpoint.config_toml, checkpoint_or_run_dir + "/config.toml");
  check_trained_objective(checkpoint, trained.config);
  set_threads(trained.config.run.threads);
  warn_if_reference_blas();
  trained.device = resolve_device(device.empty() ? std::string(choice_name(trained.config.run.device)) : device);
  trained.tokenizer = tokenizer_from_json(checkpoint.tokenizer, checkpoint_or_run_dir + "/tokenizer.json");
  // An RL run's model is judged as the policy it is: decoded or denoised (rl.policy).
  trained.objective = make_policy_objective(trained.config, *trained.tokenizer);
  trained.step = checkpoint.step;
  trained.model = build_language_model(trained.config.model, trained.tokenizer->vocab_size());
  load_module_weights(*trained.model, checkpoint.model, checkpoint_or_run_dir);
  trained.model->to(trained.device);
  trained.model->eval();
  return trained;
}

}  // namespace inkstone::cli
