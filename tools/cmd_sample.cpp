// `inkstone sample --checkpoint PATH | --run-dir DIR [--prompt TEXT | --prompts-file F] [--num N]
//  [--max-new-tokens T] [--temperature X] [--top-k K] [--top-p P] [--seed S] [--format text|jsonl]`
// Options left out take the run's [sample] values.
#include <fstream>

#include <fmt/format.h>

#include "core/errors.h"
#include "sampler/ar_sampler.h"
#include "tools/commands.h"
#include "tools/run_setup.h"

namespace inkstone::cli {
namespace {

struct SampleOptions {
  std::string checkpoint;
  std::optional<std::string> prompt;
  std::string prompts_file;
  std::optional<int64_t> num, max_new_tokens, top_k, seed;
  std::optional<double> temperature, top_p;
  std::string format = "text";
  std::string device;
};

std::vector<std::string> read_prompts(const SampleOptions& o, const SampleConfig& defaults) {
  if (!o.prompts_file.empty()) {
    std::ifstream in(o.prompts_file);
    if (!in) throw InputError(fmt::format("cannot read prompts file '{}'", o.prompts_file));
    std::vector<std::string> prompts;
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) prompts.push_back(line);
    if (prompts.empty()) throw InputError(fmt::format("prompts file '{}' has no prompts", o.prompts_file));
    return prompts;
  }
  return {o.prompt.value_or(defaults.prompt)};
}

int sample(const SampleOptions& o) {
  TrainedModel trained = load_trained_model(o.checkpoint, o.device);
  if (trained.objective->needs().mask != MaskMode::causal)
    throw InputError(fmt::format("checkpoint '{}' was trained with objective '{}', which has no sampler yet",
                                 o.checkpoint, trained.objective->name()));
  const SampleConfig& defaults = trained.config.sample;
  const Tokenizer& tokenizer = *trained.tokenizer;

  ArSampleOptions options;
  options.num_samples = o.num.value_or(defaults.num);
  options.max_new_tokens = o.max_new_tokens.value_or(defaults.max_new_tokens);
  options.sampling.temperature = o.temperature.value_or(defaults.temperature);
  options.sampling.top_k = o.top_k.value_or(defaults.top_k);
  options.sampling.top_p = o.top_p.value_or(defaults.top_p);
  options.seed = o.seed.value_or(defaults.seed);
  options.eos_id = tokenizer.specials().eos;

  const std::vector<std::string> prompts = read_prompts(o, defaults);
  std::vector<std::vector<int32_t>> prompt_ids;
  for (const auto& text : prompts) {
    std::vector<int32_t> ids = {tokenizer.specials().bos};  // documents start after bos/eos in training data
    auto encoded = tokenizer.encode(text);
    ids.insert(ids.end(), encoded.begin(), encoded.end());
    prompt_ids.push_back(std::move(ids));
  }

  ArSampleResult result = sample_autoregressive(trained.model, prompt_ids, options);
  for (size_t i = 0; i < result.samples.size(); ++i) {
    const ArSample& s = result.samples[i];
    const std::string text = tokenizer.decode(s.tokens);
    const std::string& prompt = prompts[s.prompt_index];
    if (o.format == "jsonl") {
      nlohmann::json line = {{"prompt", prompt}, {"text", text}, {"tokens", s.tokens},
                             {"finish", to_string(s.finish)}, {"prompt_index", s.prompt_index}};
      fmt::print("{}\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      fmt::print("--- sample {} ({} tokens, {}) ---\n{}{}\n", i + 1, s.tokens.size(), to_string(s.finish), prompt,
                 text);
    }
  }
  fmt::print(stderr, "{} tokens in {:.2f} s ({:.0f} tokens/s), checkpoint step {}\n", result.generated_tokens,
             result.seconds, result.tokens_per_s, trained.step);
  return 0;
}

}  // namespace

void add_sample_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<SampleOptions>();
  auto* cmd = app.add_subcommand("sample", "Generate text from a checkpoint");
  auto* checkpoint = cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint folder");
  auto* run_dir = cmd->add_option("--run-dir", o->checkpoint, "Run folder (its newest checkpoint)");
  checkpoint->excludes(run_dir);
  auto* prompt = cmd->add_option("--prompt", o->prompt, "Prompt text");
  cmd->add_option("--prompts-file", o->prompts_file, "One prompt per line")->excludes(prompt);
  cmd->add_option("--num", o->num, "Samples per prompt")->check(CLI::PositiveNumber);
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate")->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", o->temperature, "Softmax temperature; 0: greedy")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", o->top_k, "Keep the k most likely tokens; 0: all")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->top_p, "Nucleus mass")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", o->seed, "Sampling seed")->check(CLI::NonNegativeNumber);
  cmd->add_option("--format", o->format, "text | jsonl")->check(CLI::IsMember({"text", "jsonl"}));
  cmd->add_option("--device", o->device, "auto | cpu | cuda (default: the run's)");
  cmd->callback([o, &action] {
    action = [o] {
      if (o->checkpoint.empty()) throw InputError("sample needs --checkpoint PATH or --run-dir DIR");
      return sample(*o);
    };
  });
}

}  // namespace inkstone::cli
