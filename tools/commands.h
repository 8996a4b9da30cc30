// The `inkstone` subcommands: each tools/cmd_*.cpp adds one subcommand to the app and sets the action to run.
#pragma once
#include <cstdint>
#include <functional>

#include <CLI/CLI.hpp>

namespace inkstone::cli {

// Bounds of a count option, named in its error (CLI11's PositiveNumber prints 1.8e308 in full as its bound).
inline CLI::Range count_range(int64_t min, int64_t max) { return CLI::Range(min, max); }

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
