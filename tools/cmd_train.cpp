// Placeholder until the 'train' subcommand lands.
#include "tools/commands.h"

namespace inkstone::cli {
void add_train_command(CLI::App& app, Action& action) {
  app.add_subcommand("train", "(not built yet)")->callback([&action] { action = [] { return 1; }; });
}
}  // namespace inkstone::cli
