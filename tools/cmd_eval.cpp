// Placeholder until the 'eval' subcommand lands.
#include "tools/commands.h"

namespace inkstone::cli {
void add_eval_command(CLI::App& app, Action& action) {
  app.add_subcommand("eval", "(not built yet)")->callback([&action] { action = [] { return 1; }; });
}
}  // namespace inkstone::cli
