// Placeholder until the 'tokenizer' subcommand lands.
#include "tools/commands.h"

namespace inkstone::cli {
void add_tokenizer_command(CLI::App& app, Action& action) {
  app.add_subcommand("tokenizer", "(not built yet)")->callback([&action] { action = [] { return 1; }; });
}
}  // namespace inkstone::cli
