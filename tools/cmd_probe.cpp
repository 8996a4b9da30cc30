// `inkstone probe --run-dir DIR | --checkpoint PATH --prompts FILE [--out FILE.json] [--device D]`
// Per prompt (one per line of FILE) and per layer, the inverse participation ratio and spectral entropy of the
// post-SwiGLU activations (docs/probe.md); JSON on stdout, or in --out with a per-layer summary on stdout.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/input_file.h"
#include "sampler/activation_probe.h"
#include "tools/commands.h"
#include "tools/run_setup.h"

namespace inkstone::cli {
namespace {

struct ProbeOptions {
  std::string checkpoint;
  std::string prompts;
  std::string out;
  std::string device;
};

// One prompt per line; blank lines are skipped, a trailing carriage return dropped.
std::vector<std::string> read_prompt_lines(const std::string& path) {
  std::istringstream text(read_input_file(path, "prompts file"));
  std::vector<std::string> prompts;
  for (std::string line; std::getline(text, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) prompts.push_back(line);
  }
  if (prompts.empty()) throw InputError(fmt::format("{}: the prompts file holds no prompt", path));
  return prompts;
}

nlohmann::json layer_json(const LayerProbe& l) {
  return {{"layer", l.layer},
          {"width", l.width},
          {"ipr_mean", l.ipr_mean},
          {"ipr_last", l.ipr_last},
          {"spectral_entropy", l.spectral_entropy},
          {"effective_rank", l.effective_rank}};
}

int probe(const ProbeOptions& o) {
  const auto prompts = read_prompt_lines(o.prompts);
  auto trained = load_trained_model(o.checkpoint, o.device);
  const MaskMode mask = trained.objective->needs().mask;
  const auto results = probe_prompts(trained.model, *trained.tokenizer, prompts, mask, trained.device);

  nlohmann::json report = {{"step", trained.step},
                           {"objective", trained.config.objective.name},
                           {"attention", mask == MaskMode::causal ? "causal" : "bidirectional"},
                           {"prompts", nlohmann::json::array()}};
  const size_t layers = results.front().layers.size();
  std::vector<LayerProbe> mean(layers);
  for (const auto& r : results) {
    nlohmann::json per_layer = nlohmann::json::array();
    for (size_t i = 0; i < layers; ++i) {
      per_layer.push_back(layer_json(r.layers[i]));
      mean[i].layer = r.layers[i].layer;
      mean[i].width = r.layers[i].width;
      mean[i].ipr_mean += r.layers[i].ipr_mean / static_cast<double>(results.size());
      mean[i].ipr_last += r.layers[i].ipr_last / static_cast<double>(results.size());
      mean[i].spectral_entropy += r.layers[i].spectral_entropy / static_cast<double>(results.size());
      mean[i].effective_rank += r.layers[i].effective_rank / static_cast<double>(results.size());
    }
    report["prompts"].push_back({{"prompt", r.prompt}, {"tokens", r.tokens}, {"layers", per_layer}});
  }
  report["mean_over_prompts"] = nlohmann::json::array();
  for (const auto& l : mean) report["mean_over_prompts"].push_back(layer_json(l));

  if (o.out.empty()) {
    fmt::print("{}\n", report.dump(2));
    return 0;
  }
  write_file_atomic(o.out, report.dump(2) + "\n");
  fmt::print("| layer | width | IPR (mean) | IPR (last token) | spectral entropy (nats) | effective rank |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& l : mean)
    fmt::print("| {} | {} | {:.4f} | {:.4f} | {:.3f} | {:.2f} |\n", l.layer, l.width, l.ipr_mean, l.ipr_last,
               l.spectral_entropy, l.effective_rank);
  fmt::print("means over {} prompts; per prompt in {}\n", results.size(), o.out);
  return 0;
}

}  // namespace

void add_probe_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<ProbeOptions>();
  auto* cmd = app.add_subcommand("probe", "IPR and spectral entropy of post-SwiGLU activations on prompts");
  auto* checkpoint = cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint folder");
  auto* run_dir = cmd->add_option("--run-dir", o->checkpoint, "Run folder (its newest checkpoint)");
  checkpoint->excludes(run_dir);
  cmd->add_option("--prompts", o->prompts, "Prompts, one per line")->required();
  cmd->add_option("--out", o->out, "Write the JSON here (atomically) and print a per-layer table");
  cmd->add_option("--device", o->device, "auto | cpu | cuda (default: the run's)");
  cmd->callback([o, &action] {
    action = [o] {
      if (o->checkpoint.empty()) throw InputError("probe needs --checkpoint PATH or --run-dir DIR");
      return probe(*o);
    };
  });
}

}  // namespace inkstone::cli
