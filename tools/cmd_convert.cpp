// `inkstone convert --from CHECKPOINT --out RUN_DIR [--heads H] [--sources sublayer|block] [--blocks N]`:
// wraps a trained plain-residual model with delta multi-head attention residuals (models/delta_conversion.h)
// and writes a run folder whose step-0 checkpoint `inkstone train RUN_DIR/config.toml --run-dir RUN_DIR --resume`
// continues.
#include <fmt/format.h>
#include <torch/torch.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/rng_state.h"
#include "core/atomic_file.h"
#include "core/errors.h"
#include "dataset/tokenizer.h"
#include "models/delta_conversion.h"
#include "tools/commands.h"

namespace inkstone::cli {
namespace {

struct ConvertOptions {
  std::string from;
  std::string out;
  int64_t heads = 0;
  std::string sources = "sublayer";
  int64_t blocks = 0;
};

// The largest logit difference between the plain and the converted model on a probe sequence: 0 by construction,
// checked so that a conversion never silently changes what the model computes.
double probe_logit_deviation(const ModelConfig& plain_config, const CheckpointData& checkpoint, LanguageModel& routed,
                             int64_t tokenizer_vocab_size, const std::string& origin) {
  auto plain = build_language_model(plain_config, tokenizer_vocab_size);
  load_module_weights(*plain, checkpoint.model, origin);
  plain->eval();
  routed->eval();
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, tokenizer_vocab_size, {1, std::min<int64_t>(16, plain_config.max_seq_len)},
                                     torch::kLong);
  const auto deviation = (routed->forward(tokens) - plain->forward(tokens)).abs().max();
  routed->train();
  return deviation.item<double>();
}

int convert(const ConvertOptions& o) {
  const std::filesystem::path run_dir = o.out;
  if (std::filesystem::exists(run_dir / "checkpoints") && !std::filesystem::is_empty(run_dir / "checkpoints"))
    throw InputError(fmt::format("'{}' already has checkpoints: choose another --out", run_dir.string()));
  CheckpointData source = load_checkpoint(o.from, CheckpointParts::model);
  Config config = config_from_string(source.config_toml, o.from + "/config.toml");
  // The routing the conversion adds starts at zero and must train, where LoRA would freeze it.
  if (config.model.lora_rank > 0)
    throw InputError(fmt::format("'{}' adapts its model with LoRA (model.lora_rank = {}): export or start a run from it "
                                 "(which merges the adapters) and convert that",
                                 o.from, config.model.lora_rank));
  const ModelConfig plain_config = config.model;
  const int64_t heads = o.heads > 0 ? o.heads : plain_config.n_kv_heads;  // H = n_kv: the MHAR default
  const int64_t blocks = o.blocks > 0 ? o.blocks : plain_config.n_layers;
  config.model = delta_routing_config(plain_config, heads, choice_named<DeltaSources>(o.sources).value(), blocks);
  const auto tokenizer = tokenizer_from_json(source.tokenizer, o.from + "/tokenizer.json");

  torch::manual_seed(static_cast<uint64_t>(config.run.seed));
  LanguageModel routed = build_language_model(config.model, tokenizer->vocab_size());
  load_plain_weights(*routed, source.model, o.from);
  const double deviation = probe_logit_deviation(plain_config, source, routed, tokenizer->vocab_size(), o.from);
  if (deviation != 0.0)
    throw std::runtime_error(fmt::format("the converted model's logits differ from the plain model's by {}", deviation));

  CheckpointData converted;
  converted.step = 0;
  converted.model = module_weights(*routed);
  converted.state = {{"tokens_seen", 0},
                     {"elapsed_s", 0.0},
                     {"rng", capture_rng_state()},
                     {"objective", config.objective.name},
                     {"converted_from", {{"checkpoint", o.from}, {"step", source.step}}}};
  converted.config_toml = config_to_toml(config);
  converted.tokenizer = source.tokenizer;
  std::filesystem::create_directories(run_dir);
  write_file_atomic(run_dir / "config.toml", converted.config_toml);
  tokenizer->save(run_dir / "tokenizer.json");
  const auto written = save_checkpoint(run_dir, converted, config.train.keep_checkpoints);

  const auto counts = routed->param_counts();
  fmt::print("converted {} (step {}) to delta routing: {} heads, {} sources{}; +{} routing parameters ({} total)\n",
             o.from, source.step, heads, o.sources,
             config.model.residual_delta == DeltaSources::block
                 ? fmt::format(" ({} blocks)", config.model.residual_blocks)
                 : std::string(),
             counts.routing, counts.total);
  fmt::print("max |logit difference| to the plain model on a probe: {}\n", deviation);
  fmt::print("wrote {}\ncontinue: inkstone train {}/config.toml --run-dir {} --resume\n", written.string(),
             run_dir.string(), run_dir.string());
  return 0;
}

}  // namespace

void add_convert_command(CLI::App& app, Action& action) {
  auto options = std::make_shared<ConvertOptions>();
  auto* cmd = app.add_subcommand("convert", "Wrap a trained plain model with delta attention residuals");
  cmd->add_option("--from", options->from, "Checkpoint folder, or a run folder (its newest checkpoint)")->required();
  cmd->add_option("--out", options->out, "New run folder for the converted model")->required();
  cmd->add_option("--heads", options->heads, "Routing heads H (default: model.n_kv_heads)");
  cmd->add_option("--sources", options->sources, "Delta sources: sublayer (every output) or block")
      ->check(choice_member<DeltaSources>());
  cmd->add_option("--blocks", options->blocks, "Blocks of layers with --sources block (default: n_layers)");
  cmd->callback([options, &action] { action = [options] { return convert(*options); }; });
}

}  // namespace inkstone::cli
