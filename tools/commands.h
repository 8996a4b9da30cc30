// The `inkstone` subcommands: each tools/cmd_*.cpp adds one subcommand to the app and sets the action to run.
#pragma once
#include <charconv>
#include <cstdint>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "config/config.h"

namespace inkstone::cli {

// An option taking one of a config enum's values by its config spelling (config.h, ChoiceNames); the action reads
// it with choice_named.
template <typename Choice>
CLI::IsMember choice_member() {
  const auto& names = ChoiceNames<Choice>::names;
  return CLI::IsMember(std::vector<std::string>(names.begin(), names.end()));
}

// Bounds of an integer option, named in its error (CLI11's PositiveNumber prints 1.8e308 in full as its bound).
// The text is read here: CLI::Range reads it through a conversion that clamps an integer beyond int64 to the
// largest one, which a range up to INT64_MAX then accepts (a --seed of 2^63 became 2^63 − 1 without a word).
inline CLI::Validator count_range(int64_t min, int64_t max) {
  const std::string bounds = "[" + std::to_string(min) + " - " + std::to_string(max) + "]";
  return CLI::Validator(
      [min, max, bounds](std::string& text) -> std::string {
        const char* first = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
        const char* last = text.data() + text.size();
        int64_t value = 0;
        const auto [end, error] = std::from_chars(first, last, value);
        if (error == std::errc::invalid_argument || end != last) return {};  // not an integer: the conversion says so
        if (error == std::errc::result_out_of_range || value < min || value > max)
          return "Value " + text + " not in range " + bounds;
        return {};
      },
      "INT in " + bounds);
}

// The action the parsed subcommand runs; it returns the process exit code.
using Action = std::function<int()>;

void add_version_command(CLI::App& app, Action& action);
void add_train_command(CLI::App& app, Action& action);
void add_sample_command(CLI::App& app, Action& action);
void add_eval_command(CLI::App& app, Action& action);
void add_gen_ppl_command(CLI::App& app, Action& action);
// `probe`: feed-forward activation statistics on prompts (tools/cmd_probe.cpp).
void add_probe_command(CLI::App& app, Action& action);
void add_data_command(CLI::App& app, Action& action);
// `data synth`, added under `data` (tools/cmd_data_synth.cpp).
void add_data_synth_command(CLI::App& data, Action& action);
void add_tokenizer_command(CLI::App& app, Action& action);
// `convert`: a plain checkpoint wrapped with delta attention residuals (tools/cmd_convert.cpp).
void add_convert_command(CLI::App& app, Action& action);
void add_launch_command(CLI::App& app, Action& action);
// `import hf` and `export hf`: Hugging Face model folders in and out (tools/cmd_import.cpp, tools/cmd_export.cpp).
void add_import_command(CLI::App& app, Action& action);
void add_export_command(CLI::App& app, Action& action);
// `checkpoint consolidate`: a ZeRO checkpoint as an ordinary one (tools/cmd_checkpoint.cpp).
void add_checkpoint_command(CLI::App& app, Action& action);
// `plot`: runs' metrics drawn with Cairo (tools/cmd_plot.cpp, viz/).
void add_plot_command(CLI::App& app, Action& action);
// `sweep`: variants x seeds, trained resumably, reported against the noise floor (tools/cmd_sweep.cpp, sweep/).
void add_sweep_command(CLI::App& app, Action& action);

}  // namespace inkstone::cli
