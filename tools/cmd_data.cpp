// Placeholder until the 'data' subcommand lands.
#include "tools/commands.h"

namespace inkstone::cli {
void add_data_command(CLI::App& app, Action& action) {
  app.add_subcommand("data", "(not built yet)")->callback([&action] { action = [] { return 1; }; });
}
}  // namespace inkstone::cli
