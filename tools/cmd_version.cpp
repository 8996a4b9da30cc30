// Placeholder until the 'version' subcommand lands.
#include "tools/commands.h"

namespace inkstone::cli {
void add_version_command(CLI::App& app, Action& action) {
  app.add_subcommand("version", "(not built yet)")->callback([&action] { action = [] { return 1; }; });
}
}  // namespace inkstone::cli
