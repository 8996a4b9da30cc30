// The `inkstone` command line. Exit codes: 0 success, 2 usage/config/input error, 1 runtime failure.
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include <c10/util/Exception.h>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/json_error.h"
#include "core/platform.h"
#include "core/tensor_memory.h"
#include "tools/commands.h"
#include "train/launch_env.h"

namespace {

// The ranks of a data-parallel run share one terminal: each error line says whose it is. Read once at the start,
// so that reporting an allocation failure allocates nothing more.
std::string rank_prefix() {
  try {
    const inkstone::LaunchEnv launch = inkstone::launch_env_from_environment();
    if (launch.distributed()) return fmt::format("rank {}: ", launch.rank);
  } catch (const std::exception&) {
    // Malformed launch variables: the command itself reports them.
  }
  return "";
}

// A message that already starts with its rank, as a failed collective's does, keeps it once.
void print_error(const std::string& prefix, const char* message) {
  const bool named = !prefix.empty() && std::strncmp(message, prefix.c_str(), prefix.size()) == 0;
  fmt::print(stderr, "error: {}{}\n", named ? "" : prefix.c_str(), message);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace inkstone;
  keep_freed_memory_for_reuse();
  report_file_size_limit_as_write_error();
  count_cpu_tensor_memory();  // before the first tensor: the metrics' cpu_max_allocated_mib
  CLI::App app{"inkstone: train and sample language models with pluggable objectives"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");

  cli::Action action;
  cli::add_train_command(app, action);
  cli::add_sample_command(app, action);
  cli::add_eval_command(app, action);
  cli::add_gen_ppl_command(app, action);
  cli::add_probe_command(app, action);
  cli::add_data_command(app, action);
  cli::add_tokenizer_command(app, action);
  cli::add_convert_command(app, action);
  cli::add_import_command(app, action);
  cli::add_export_command(app, action);
  cli::add_checkpoint_command(app, action);
  cli::add_plot_command(app, action);
  cli::add_sweep_command(app, action);
  cli::add_launch_command(app, action);
  cli::add_version_command(app, action);

  const std::string prefix = rank_prefix();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    print_error(prefix, fmt::format("{} (see --help)", e.what()).c_str());
    return 2;
  }

  try {
    return action ? action() : 2;
  } catch (const InputError& e) {
    print_error(prefix, e.what());
    return 2;
  } catch (const nlohmann::json::exception& e) {
    // Every JSON document comes from a file the user gave or a folder they pointed at: bad input.
    print_error(prefix, describe_json_error(e).c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    print_error(prefix, "out of memory (an allocation failed; a smaller batch, sequence or vocabulary needs less)");
    return 1;
  } catch (const c10::Error& e) {
    // libtorch's what() carries a C++ stack dump; the user gets its message on one line.
    std::string message = e.what_without_backtrace();
    for (char& c : message)
      if (c == '\n') c = ' ';
    print_error(prefix, message.c_str());
    return 1;
  } catch (const std::exception& e) {
    print_error(prefix, e.what());
    return 1;
  }
}
