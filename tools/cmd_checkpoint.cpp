// `inkstone checkpoint consolidate`: a ZeRO run's checkpoint (optimizer state in one shard per rank) rewritten as
// an ordinary one, which resumes on any number of ranks (docs/training.md, "ZeRO").
// `inkstone checkpoint distance A B`: the Euclidean distance between two checkpoints' weights (docs/sweeps.md,
// "Twin runs").
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/weight_distance.h"
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
  // draws a fresh stream (checkpoint/rng_state.h, restore_rank_rng).
  data.state.erase("rng_ranks");
  data.state.erase("world_size");
  data.state["consolidated"] = true;
  const auto folder = save_checkpoint(o.out, data, 0);
  fmt::print("{}: step {}, optimizer state from {} shard(s), {} tensors\n", folder.string(), data.step,
             shards, data.optimizer.size());
  return 0;
}

struct DistanceOptions {
  std::string first;
  std::string second;
  std::string format = "text";
};

int distance(const DistanceOptions& o) {
  const CheckpointData a = load_checkpoint(o.first, CheckpointParts::model),
                       b = load_checkpoint(o.second, CheckpointParts::model);
  const WeightDistance d = weight_distance(a.model, b.model);
  if (o.format == "json") {
    fmt::print("{}\n", nlohmann::json{{"first", a.folder.string()},
                                      {"second", b.folder.string()},
                                      {"distance", d.distance},
                                      {"norm_first", d.norm_a},
                                      {"norm_second", d.norm_b},
                                      {"relative", d.distance / d.norm_a},
                                      {"tensors", d.tensors},
                                      {"differing_tensors", d.differing_tensors}}
                           .dump());
    return 0;
  }
  fmt::print(
      "{} (step {}) vs {} (step {}): distance {:.6g}, relative to the first's norm {:.6g}; {} of {} tensors "
      "differ\n",
      a.folder.string(), a.step, b.folder.string(), b.step, d.distance, d.distance / d.norm_a, d.differing_tensors,
      d.tensors);
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

  auto d = std::make_shared<DistanceOptions>();
  auto* distance_cmd =
      cmd->add_subcommand("distance", "Euclidean distance between two checkpoints' weights (twin runs, seeds)");
  distance_cmd->add_option("first", d->first, "Checkpoint folder, or a run folder (its newest checkpoint)")->required();
  distance_cmd->add_option("second", d->second, "The same for the other checkpoint")->required();
  distance_cmd->add_option("--format", d->format, "text | json")->check(CLI::IsMember({"text", "json"}));
  distance_cmd->callback([d, &action] { action = [d] { return distance(*d); }; });
}

}  // namespace inkstone::cli
