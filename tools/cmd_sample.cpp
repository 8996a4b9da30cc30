// Placeholder until the 'sample' subcommand lands.
#include "tools/commands.h"

namespace inkstone::cli {
void add_sample_command(CLI::App& app, Action& action) {
  app.add_subcommand("sample", "(not built yet)")->callback([&action] { action = [] { return 1; }; });
}
}  // namespace inkstone::cli
