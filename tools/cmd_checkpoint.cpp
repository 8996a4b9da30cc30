// `inkstone checkpoint consolidate`: a ZeRO run's checkpoint (optimizer state in one shard per rank) rewritten as
// an ordinary one, which resumes on any number of ranks (docs/training.md, "ZeRO").
#include <fmt/format.h>

#include "checkpoint/checkpoint.h"
#include "tools/commands.h"

namespace inkstone::cli {
namespace {

struct ConsolidateOptions {
  std::string source;
  std::string out;
};

int consolidate(const ConsolidateOptions& o) {
  CheckpointData data = load_checkpoint(o.source);
  const int64_t shards = data.optimizer_shards;
  consolidate_optimizer_shards(data);
  // The ranks' random streams belong to a world size; a consolidated run may resume on another, where each rank
  // draws a fresh stream (train/distributed.h, restore_rank_rng).
  data.state.erase("rng_ranks");
  data.state.erase("world_size");
  data.state["consolidated"] = true;
  const auto folder = save_checkpoint(o.out, data, 0);
  fmt::print("{}: step {}, optimizer state from {} shard(s), {} tensors\n", folder.string(), data.step,
             shards, data.optimizer.size());
  return 0;
}

}  // namespace

void add_checkpoint_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("checkpoint", "Rewrite checkpoints");
  cmd->require_subcommand(1);
  auto o = std::make_shared<ConsolidateOptions>();
  auto* consolidate_cmd = cmd->add_subcommand(
      "consolidate", "Gather a ZeRO checkpoint's optimizer shards into one ordinary checkpoint under OUT/checkpoints");
  consolidate_cmd->add_option("source", o->source, "Checkpoint folder, or a run folder (its newest checkpoint)")
      ->required();
  consolidate_cmd->add_option("--out", o->out, "Run folder to write the checkpoint into")->required();
  consolidate_cmd->callback([o, &action] { action = [o] { return consolidate(*o); }; });
}

}  // namespace inkstone::cli
