// Data-parallel training over Gloo with real processes: this binary re-executes itself as the ranks (the
// DISABLED_ worker below, run with the launch variables set), and the CLI's `launch` starts ranks of `train`.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "dataset/byte_tokenizer.h"
#include "objectives/objective.h"
#include "rl/rollout_source.h"
#include "tests/fixtures.h"
#include "tests/test_paths.h"
#include "tests/train/rank_processes.h"
#include "train/gradient_synchroniser.h"
#include "train/session.h"
#include "train/stop_signal.h"
#include "train/window_source.h"

namespace inkstone {
namespace {

using testing::Child;
using testing::max_difference;
using testing::read_text;
using testing::spawn;
using testing::wait_for;

constexpr int64_t kSteps = 20;
constexpr int kWorkerDistributedError = 7;  // a worker's exit code when a collective failed

// A global batch of 8 rows of 16 tokens. Buckets of 10 KB cut the tiny model's gradients into several
// all-reduces, started from the hooks as each bucket fills.
// train_extra and distributed_extra: more lines of those tables.
std::string tiny_config_text(const std::filesystem::path& data_dir, int64_t grad_accum, double timeout_s,
                             const std::string& train_extra = "checkpoint_interval = 0\nkeep_checkpoints = 1\n",
                             const std::string& distributed_extra = "") {
  return fmt::format(
      "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\nmax_seq_len = 32\n"
      "[data]\npath = \"{}\"\nseq_len = 16\n"
      "[optim]\nlearning_rate = 3e-3\n"
      "[schedule]\nwarmup_steps = 2\n"
      "[train]\nsteps = {}\nbatch_size = 8\ngrad_accum = {}\nlog_interval = 1\neval_interval = 0\n"
      "eval_batches = 3\n{}"
      "[distributed]\ntimeout_s = {}\nbucket_mb = 0.01\n{}",
      data_dir.string(), kSteps, grad_accum, train_extra, timeout_s, distributed_extra);
}

std::shared_ptr<const WindowLoader> loader(const Config& config, const std::string& split, int64_t rank) {
  WindowLoaderOptions o;
  o.window_len = config.data.seq_len + 1;
  o.seed = static_cast<uint64_t>(config.run.seed);
  o.split = split;
  o.rank = rank;
  return std::make_shared<WindowLoader>(config.data.path, o);
}

// Trains `config` as rank `distributed->rank()`, calling on_step with each step's loss; with `resume`, from the
// latest checkpoint in run_dir.
TrainResult train_tiny(const Config& config, const std::filesystem::path& run_dir,
                       std::shared_ptr<Distributed> distributed, std::function<void(int64_t, double)> on_step,
                       bool resume = false) {
  auto tokenizer = std::make_shared<ByteTokenizer>();
  torch::manual_seed(static_cast<uint64_t>(config.run.seed));
  auto model = build_language_model(config.model, tokenizer->vocab_size());
  const int64_t rank = distributed ? distributed->rank() : 0;
  TrainingSession session(config, model, make_objective(config, *tokenizer), tokenizer, run_dir, torch::kCPU,
                          std::move(distributed));
  WindowSource source(session, loader(config, "train", rank), loader(config, "val", 0));
  source.on_step = std::move(on_step);
  if (resume) session.resume(load_checkpoint(run_dir), source);
  return session.run(source);
}

// GFlowRL on sums with a mixture-of-experts policy whose router bias balances the expert load (so that the ranks
// must also agree on the load), 4 prompts x 4 rollouts a step in 2 mini-batches, 3 steps.
Config tiny_rl_config(double timeout_s) {
  Config config = default_config();
  config.model = testing::tiny_model_config(/*init_std=*/0.3);
  config.model.max_seq_len = 48;
  config.data.seq_len = 48;  // unused by RL, but checked against the model
  config.model.ffn_pattern = "M";
  config.model.moe_experts = 4;
  config.model.moe_top_k = 2;
  config.model.moe_bias_update_rate = 0.01;
  config.objective.name = "gflowrl";
  config.run.threads = 1;
  config.rl.task = "arithmetic";
  // Groups whose rewards are all alike still train (a random policy rarely answers right), so that every step
  // updates the weights and the router biases.
  config.gflowrl.filter_degenerate = false;
  config.rl.prompts_per_step = 4;
  config.rl.group_size = 4;
  config.rl.mini_batches = 2;
  config.rl.max_new_tokens = 8;
  config.rl.eval_prompts = 4;
  config.rl.eval_samples = 2;
  config.train.steps = 3;
  config.train.eval_interval = 0;
  config.train.checkpoint_interval = 0;
  config.schedule.warmup_steps = 0;
  config.distributed.timeout_s = timeout_s;
  return config;
}

// Σ p² over every parameter and buffer (the router bias included) in float64: equal on two ranks only if their
// weights are.
double weight_checksum(torch::nn::Module& model) {
  double sum = 0;
  for (const auto& p : model.parameters()) sum += p.to(torch::kDouble).pow(2).sum().item<double>();
  return sum;
}

// The RL rank: writes "step checksum" lines to losses_rank<r>.txt.
void rl_as_one_rank(const Config& config, const std::filesystem::path& dir, std::shared_ptr<Distributed> distributed) {
  auto tokenizer = std::make_shared<ByteTokenizer>();
  torch::manual_seed(static_cast<uint64_t>(config.run.seed));
  auto policy = build_language_model(config.model, tokenizer->vocab_size());
  std::ofstream checksums(dir / fmt::format("losses_rank{}.txt", distributed->rank()));
  TrainingSession session(config, policy, make_objective(config, *tokenizer), tokenizer, dir / "run", torch::kCPU,
                          std::move(distributed));
  RolloutSource source(session);
  source.on_step = [&](int64_t step, const nlohmann::json&) {
    const auto whole = policy->whole_parameters();  // ZeRO-3 ranks hold their own branch weights only
    checksums << fmt::format("{} {:.17g}\n", step, weight_checksum(*policy)) << std::flush;
  };
  session.run(source);
}

// The rank side of the tests: reads INKSTONE_TEST_DIR/config.toml, trains as the rank the launch variables name,
// writes "step loss" lines to losses_rank<r>.txt (an RL config: see rl_as_one_rank). With INKSTONE_TEST_EXIT_AT_STEP, rank 1 exits abruptly after
// that step; with INKSTONE_TEST_SIGNAL_AT_STEP, rank 1 sends itself SIGUSR1 when that step's loss is reported; a
// failed collective exits with kWorkerDistributedError after printing its message. With
// INKSTONE_TEST_RUN, the run folder is that subfolder (default "run"); with INKSTONE_TEST_RESUME, the run resumes
// from its latest checkpoint.
TEST(DataParallelWorker, DISABLED_TrainAsOneRank) {
  const char* dir_text = std::getenv("INKSTONE_TEST_DIR");
  ASSERT_NE(dir_text, nullptr);
  const std::filesystem::path dir = dir_text;
  const Config config = load_config((dir / "config.toml").string());
  const LaunchEnv launch = launch_env_from_environment();
  const char* exit_text = std::getenv("INKSTONE_TEST_EXIT_AT_STEP");
  const int64_t exit_at = exit_text && launch.rank == 1 ? std::atoll(exit_text) : -1;
  const char* signal_text = std::getenv("INKSTONE_TEST_SIGNAL_AT_STEP");
  const int64_t signal_at = signal_text && launch.rank == 1 ? std::atoll(signal_text) : -1;
  if (signal_text) install_stop_signal_handlers();
  std::ofstream losses(dir / fmt::format("losses_rank{}.txt", launch.rank));
  try {
    auto distributed = std::make_shared<Distributed>(launch, torch::kCPU, timeout_of(config.distributed));
    if (objective_batch_kind(config.objective.name) == BatchKind::rollouts)
      return rl_as_one_rank(config, dir, distributed);
    const char* run = std::getenv("INKSTONE_TEST_RUN");
    train_tiny(
        config, dir / (run ? run : "run"), distributed,
        [&](int64_t step, double loss) {
          losses << fmt::format("{} {:.17g}\n", step, loss) << std::flush;
          if (step == exit_at) std::_Exit(3);
          if (step == signal_at) ::raise(SIGUSR1);
        },
        std::getenv("INKSTONE_TEST_RESUME") != nullptr);
  } catch (const DistributedError& e) {
    fmt::print(stderr, "{}\n", e.what());
    std::_Exit(kWorkerDistributedError);
  }
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

std::map<int64_t, double> read_losses(const std::filesystem::path& path) {
  std::map<int64_t, double> losses;
  std::ifstream in(path);
  int64_t step = 0;
  double loss = 0;
  while (in >> step >> loss) losses[step] = loss;
  return losses;
}

// Starts `world` worker ranks on `dir` and returns them.
std::vector<Child> start_workers(const std::filesystem::path& dir, int world,
                                 std::vector<std::pair<std::string, std::string>> extra_env = {}) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string port = std::to_string(free_port());
  std::vector<Child> ranks;
  for (int rank = 0; rank < world; ++rank) {
    auto env = extra_env;
    env.insert(env.end(), {{"RANK", std::to_string(rank)}, {"LOCAL_RANK", std::to_string(rank)},
                           {"WORLD_SIZE", std::to_string(world)}, {"MASTER_ADDR", "127.0.0.1"},
                           {"MASTER_PORT", port}, {"INKSTONE_TEST_DIR", dir.string()}});
    ranks.push_back(spawn({self, "--gtest_also_run_disabled_tests", "--gtest_filter=DataParallelWorker.*"}, env,
                          dir / fmt::format("output_rank{}.txt", rank)));
  }
  return ranks;
}

class DataParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(testing::temp_dir("data_parallel"));
    testing::prepare_word_corpus(*dir_);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::filesystem::path data() { return *dir_ / "data"; }
  static std::filesystem::path* dir_;
};
std::filesystem::path* DataParallel::dir_ = nullptr;

// The acceptance test: the same global batch over 2 ranks (each accumulating 2 micro-batches) and in one
// process gives the same losses and weights. Only the order of float additions differs (the all-reduce sums
// the ranks' partial gradients), so agreement is to rounding, not bitwise.
TEST_F(DataParallel, TwoRanksMatchOneProcessForTwentySteps) {
  const auto dir = *dir_ / "two_ranks";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "config.toml") << tiny_config_text(data(), /*grad_accum=*/2, /*timeout_s=*/60);
  }
  auto ranks = start_workers(dir, 2);

  // Also 2 micro-batches: validation batches hold batch_size / grad_accum rows, so both runs score the same ones.
  const Config single = config_from_string(tiny_config_text(data(), 2, 60), "single.toml");
  std::map<int64_t, double> expected;
  train_tiny(single, dir / "single_run", nullptr, [&](int64_t step, double loss) { expected[step] = loss; });

  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(wait_for(ranks[r], std::chrono::seconds(120)), 0) << read_text(ranks[r].output);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));
  for (int r = 0; r < 2; ++r) {
    const auto losses = read_losses(dir / fmt::format("losses_rank{}.txt", r));
    ASSERT_EQ(losses.size(), expected.size()) << "rank " << r;
    for (const auto& [step, loss] : expected) EXPECT_NEAR(losses.at(step), loss, 1e-5) << "rank " << r << " step " << step;
  }

  const CheckpointData reference = load_checkpoint(dir / "single_run");
  const CheckpointData parallel = load_checkpoint(dir / "run");
  ASSERT_EQ(parallel.step, kSteps);
  ASSERT_EQ(parallel.model.size(), reference.model.size());
  for (size_t i = 0; i < reference.model.size(); ++i) {
    ASSERT_EQ(parallel.model[i].first, reference.model[i].first);
    const double difference = (parallel.model[i].second - reference.model[i].second).abs().max().item<double>();
    EXPECT_LT(difference, 1e-5) << reference.model[i].first;
  }
  // Rank 0 alone wrote the run folder: one metrics line per step, a checkpoint that knows both random streams.
  const auto lines_of = [](const std::filesystem::path& run, const std::string& split) {
    std::ifstream metrics(run / "metrics.jsonl");
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(metrics, line);)
      if (nlohmann::json::parse(line).at("split") == split) lines.push_back(nlohmann::json::parse(line));
    return lines;
  };
  EXPECT_EQ(lines_of(dir / "run", "train").size(), static_cast<size_t>(kSteps));
  // Validation sharded over the ranks (rank 0 scores 2 of the 3 batches, rank 1 one) reports the one-process
  // numbers.
  const auto val = lines_of(dir / "run", "val"), single_val = lines_of(dir / "single_run", "val");
  ASSERT_EQ(val.size(), 1u);
  ASSERT_EQ(single_val.size(), 1u);
  EXPECT_EQ(val[0].at("tokens"), single_val[0].at("tokens"));
  EXPECT_NEAR(val[0].at("loss").get<double>(), single_val[0].at("loss").get<double>(), 1e-5);
  EXPECT_EQ(parallel.state.at("world_size"), 2);
  EXPECT_EQ(parallel.state.at("rng_ranks").size(), 2u);

  // Resuming that checkpoint with another number of processes is refused with the reason.
  auto tokenizer = std::make_shared<ByteTokenizer>();
  auto model = build_language_model(single.model, tokenizer->vocab_size());
  TrainingSession session(single, model, make_objective(single, *tokenizer), tokenizer, dir / "resumed",
                          torch::kCPU);
  WindowSource source(session, loader(single, "train", 0), loader(single, "val", 0));
  const std::string refusal = testing::input_error_of([&] { session.resume(parallel, source); });
  EXPECT_NE(refusal.find("written by 2 rank(s) but this run has 1"), std::string::npos) << refusal;
}

// A stop signal that reaches one rank only stops both after the same step, with one checkpoint of that step. The
// ranks' vote is read one step late (train/stop_signal.h), and the signalled rank hears of its signal when the
// step's loss is reported, which is itself one update late where the device decides (libtorch >= 2.4 on the CPU).
TEST_F(DataParallel, AStopSignalToOneRankStopsEveryRankAfterTheSameStep) {
  const auto dir = *dir_ / "signal";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "config.toml") << tiny_config_text(data(), /*grad_accum=*/1, /*timeout_s=*/60);
  }
  constexpr int64_t kSignalAt = 5;
  auto ranks = start_workers(dir, 2, {{"INKSTONE_TEST_SIGNAL_AT_STEP", std::to_string(kSignalAt)}});
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(wait_for(ranks[r], std::chrono::seconds(120)), 0) << read_text(ranks[r].output);
  const auto last_step = [&](int r) { return read_losses(dir / fmt::format("losses_rank{}.txt", r)).rbegin()->first; };
  const int64_t stopped_after = last_step(0);
  EXPECT_EQ(last_step(1), stopped_after);
  EXPECT_GE(stopped_after, kSignalAt + 1);
  EXPECT_LE(stopped_after, kSignalAt + 2);
  EXPECT_EQ(load_checkpoint(dir / "run").step, stopped_after);
}

// RL over 2 ranks: each rolls out 2 of the step's 4 prompts, and after every step both hold the same weights to
// the bit (the same summed gradient, the same router-bias update from the summed expert load); rank 0 alone
// writes the metrics and a checkpoint that knows both ranks' random streams. (Rollout draws are keyed by global
// group, so each rank draws the completions one process would; the gradient sum itself is the one tested above.)
TEST_F(DataParallel, RlRanksRollOutTheirShareAndStayInStep) {
  const auto dir = *dir_ / "rl";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "config.toml") << config_to_toml(tiny_rl_config(/*timeout_s=*/60));
  }
  auto ranks = start_workers(dir, 2);
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(wait_for(ranks[r], std::chrono::seconds(120)), 0) << read_text(ranks[r].output);
  const auto rank0 = read_losses(dir / "losses_rank0.txt");
  const auto rank1 = read_losses(dir / "losses_rank1.txt");
  ASSERT_EQ(rank0.size(), 3u);
  EXPECT_EQ(rank0, rank1);

  const CheckpointData checkpoint = load_checkpoint(dir / "run");
  EXPECT_EQ(checkpoint.step, 3);
  EXPECT_EQ(checkpoint.state.at("rng_ranks").size(), 2u);
  double bias_moved = 0;
  for (const auto& [name, tensor] : checkpoint.model)
    if (name.find("selection_bias") != std::string::npos) bias_moved += tensor.abs().sum().item<double>();
  EXPECT_GT(bias_moved, 0);  // the balancing ran, so the agreement above covers it
  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  int64_t train_lines = 0, eval_lines = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto json = nlohmann::json::parse(line);
    train_lines += json.at("split") == "train";
    if (json.at("split") == "eval") {
      ++eval_lines;
      EXPECT_EQ(json.at("problems").get<double>(), 4.0);  // 2 held-out problems on each rank
    }
  }
  EXPECT_EQ(train_lines, 3);
  EXPECT_EQ(eval_lines, 2);  // before the first step and after the last
}


// ZeRO stages 1, 2 and 3 over 2 ranks (2 micro-batches each; stage 2 with every block recomputed in backward,
// stage 3 gathering each branch's weights per use) give the one-process losses, weights and AdamW moments; each
// rank writes its optimizer shard, and resuming the sharded checkpoint of step 10 on 2 ranks continues bitwise. Consolidated, the checkpoint is an ordinary one
// that resumes in one process as the one-process run continues.
TEST_F(DataParallel, ZeroStagesMatchOneProcessAndResumeFromShards) {
  const auto dir = *dir_ / "zero";
  std::filesystem::create_directories(dir);
  const std::string every_ten = "checkpoint_interval = 10\nkeep_checkpoints = 2\n";
  const std::string single_text = tiny_config_text(data(), 1, 60, every_ten);
  const Config single = config_from_string(single_text, "single.toml");
  std::map<int64_t, double> expected;
  train_tiny(single, dir / "single_run", nullptr, [&](int64_t step, double loss) { expected[step] = loss; });
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));
  const CheckpointData reference = load_checkpoint(dir / "single_run");

  for (const int stage : {1, 2, 3}) {
    const auto stage_dir = dir / fmt::format("stage{}", stage);
    std::filesystem::create_directories(stage_dir);
    const std::string recompute = stage == 2 ? "activation_checkpointing = 1\n" : "";
    const std::string text =
        tiny_config_text(data(), 2, 60, every_ten + recompute, fmt::format("zero_stage = {}\n", stage));
    std::ofstream(stage_dir / "config.toml") << text;
    auto ranks = start_workers(stage_dir, 2);
    for (int r = 0; r < 2; ++r)
      ASSERT_EQ(wait_for(ranks[r], std::chrono::seconds(120)), 0) << read_text(ranks[r].output);
    const auto losses = read_losses(stage_dir / "losses_rank0.txt");
    ASSERT_EQ(losses.size(), expected.size());
    for (const auto& [step, loss] : expected) EXPECT_NEAR(losses.at(step), loss, 1e-5) << "stage " << stage << " step " << step;

    const CheckpointData sharded = load_checkpoint(stage_dir / "run");
    ASSERT_EQ(sharded.step, kSteps);
    EXPECT_EQ(sharded.optimizer_shards, 2);
    EXPECT_TRUE(sharded.optimizer.empty());
    EXPECT_LT(max_difference(sharded.model, reference.model), 1e-5) << "stage " << stage;
    CheckpointData whole = sharded;
    consolidate_optimizer_shards(whole);
    EXPECT_LT(max_difference(whole.optimizer, reference.optimizer), 1e-5) << "stage " << stage;

    // Resume step 10's shards on 2 ranks: the same losses and weights, to the bit.
    const auto step10 = stage_dir / "run" / "checkpoints" / "step_000010";
    std::filesystem::create_directories(stage_dir / "resumed" / "checkpoints");
    std::filesystem::copy(step10, stage_dir / "resumed" / "checkpoints" / "step_000010",
                          std::filesystem::copy_options::recursive);
    auto resumed_ranks = start_workers(stage_dir, 2, {{"INKSTONE_TEST_RUN", "resumed"}, {"INKSTONE_TEST_RESUME", "1"}});
    for (int r = 0; r < 2; ++r)
      ASSERT_EQ(wait_for(resumed_ranks[r], std::chrono::seconds(120)), 0) << read_text(resumed_ranks[r].output);
    const auto resumed_losses = read_losses(stage_dir / "losses_rank0.txt");
    ASSERT_EQ(resumed_losses.size(), 10u);
    for (const auto& [step, loss] : resumed_losses) EXPECT_EQ(loss, losses.at(step)) << "stage " << stage << " step " << step;
    const CheckpointData resumed = load_checkpoint(stage_dir / "resumed");
    EXPECT_EQ(max_difference(resumed.model, sharded.model), 0.0) << "stage " << stage;
  }

  // The CLI consolidates step 10 of stage 2 into an ordinary checkpoint; one process resumes it and ends where
  // the one-process run ended.
  Child consolidate = spawn({testing::cli_binary().string(), "checkpoint", "consolidate",
                             (dir / "stage2" / "run" / "checkpoints" / "step_000010").string(), "--out",
                             (dir / "consolidated").string()},
                            {}, dir / "consolidate_output.txt");
  ASSERT_EQ(wait_for(consolidate, std::chrono::seconds(60)), 0) << read_text(consolidate.output);
  const CheckpointData consolidated = load_checkpoint(dir / "consolidated");
  EXPECT_EQ(consolidated.optimizer_shards, 0);
  EXPECT_FALSE(consolidated.state.contains("rng_ranks"));
  std::map<int64_t, double> continued;
  train_tiny(single, dir / "consolidated", nullptr, [&](int64_t step, double loss) { continued[step] = loss; },
             /*resume=*/true);
  ASSERT_EQ(continued.size(), 10u);
  for (const auto& [step, loss] : continued) EXPECT_NEAR(loss, expected.at(step), 1e-5) << "step " << step;
  EXPECT_LT(max_difference(load_checkpoint(dir / "consolidated").model, reference.model), 1e-5);

  // Resuming the shards with another layout is refused with the way out.
  const std::string refusal = testing::input_error_of([&] {
    train_tiny(single, dir / "stage2" / "resumed", nullptr, [](int64_t, double) {}, /*resume=*/true);
  });
  EXPECT_NE(refusal.find("2 ZeRO shards"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("inkstone checkpoint consolidate"), std::string::npos) << refusal;
}

// Runs `config_text` as 2 ranks in dir/name and returns rank 0's "step value" lines.
std::map<int64_t, double> two_ranks(const std::filesystem::path& dir, const std::string& name,
                                    const std::string& config_text) {
  const auto run = dir / name;
  std::filesystem::create_directories(run);
  std::ofstream(run / "config.toml") << config_text;
  auto ranks = start_workers(run, 2);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(wait_for(ranks[r], std::chrono::seconds(120)), 0) << read_text(ranks[r].output);
  return read_losses(run / "losses_rank0.txt");
}

// Beyond AR: uniform diffusion (each rank draws its own noise, the same under every layout) and GFlowRL with a
// mixture-of-experts policy (rollouts and held-out evaluation generate with the whole policy under stage 3) train
// under ZeRO-2 and ZeRO-3 as under DDP on the same 2 ranks.
TEST_F(DataParallel, ZeroMatchesDdpForDiffusionAndRl) {
  const auto dir = *dir_ / "zero_objectives";
  const std::string diffusion = "[objective]\nname = \"uniform_diffusion\"\n";
  const auto ddp = two_ranks(dir, "diffusion_ddp", tiny_config_text(data(), 1, 60) + diffusion);
  ASSERT_EQ(ddp.size(), static_cast<size_t>(kSteps));
  for (const int stage : {2, 3}) {
    const std::string train = stage == 3 ? "checkpoint_interval = 0\nactivation_checkpointing = 2\n"
                                         : "checkpoint_interval = 0\n";
    const auto zero = two_ranks(dir, fmt::format("diffusion_zero{}", stage),
                                tiny_config_text(data(), 1, 60, train, fmt::format("zero_stage = {}\n", stage)) +
                                    diffusion);
    ASSERT_EQ(zero.size(), ddp.size());
    for (const auto& [step, loss] : ddp)
      EXPECT_NEAR(zero.at(step), loss, 1e-5) << "diffusion stage " << stage << " step " << step;
  }

  Config rl = tiny_rl_config(/*timeout_s=*/60);
  const auto rl_ddp = two_ranks(dir, "rl_ddp", config_to_toml(rl));
  ASSERT_EQ(rl_ddp.size(), 3u);
  for (const int stage : {2, 3}) {
    rl.distributed.zero_stage = stage;
    const auto rl_zero = two_ranks(dir, fmt::format("rl_zero{}", stage), config_to_toml(rl));
    ASSERT_EQ(rl_zero.size(), rl_ddp.size());
    for (const auto& [step, checksum] : rl_ddp)
      EXPECT_NEAR(rl_zero.at(step), checksum, 1e-6 * std::abs(checksum))
          << "RL weight checksum, stage " << stage << " step " << step;
  }
}

// A diffusion policy (docs/rl.md, "Diffusion policies") draws its rollouts and its likelihood's noise by global
// row, so 2 ranks denoise the completions one process denoises and score them under the same noise: the weights
// agree with the one-process run's to rounding (the all-reduce sums the ranks' gradients in another order).
TEST_F(DataParallel, DiffusionPolicyRlOnTwoRanksMatchesOneProcess) {
  const auto dir = *dir_ / "rl_diffusion";
  Config rl = tiny_rl_config(/*timeout_s=*/60);
  rl.model = testing::tiny_model_config(/*init_std=*/0.3);
  rl.model.max_seq_len = 48;
  // FlowRL: its log Z head moves the policy even where every reward of a group is the same (random weights
  // rarely answer right).
  rl.objective.name = "flowrl";
  rl.flowrl.head_dropout = 0;  // dropout draws from each process's own generator
  rl.rl.mini_batches = 1;      // a mini-batch takes groups from every rank: with one, all of them, as one process
  rl.rl.policy = "uniform_diffusion";
  rl.rl.elbo_samples = 2;
  rl.sample.steps = 4;
  const auto parallel = two_ranks(dir, "two", config_to_toml(rl));
  const auto single_dir = dir / "one";
  std::filesystem::create_directories(single_dir);
  rl_as_one_rank(rl, single_dir, std::make_shared<Distributed>());
  const auto single = read_losses(single_dir / "losses_rank0.txt");
  ASSERT_EQ(single.size(), 3u);
  ASSERT_EQ(parallel.size(), single.size());
  for (const auto& [step, checksum] : single)
    EXPECT_NEAR(parallel.at(step), checksum, 1e-6 * std::abs(checksum)) << "weight checksum, step " << step;
  EXPECT_NE(single.at(1), single.at(3));  // the policy moved
}

// LoRA on 2 ranks (docs/training.md, "LoRA"): only the adapters are synchronised, sharded and stepped, so DDP trains
// as one process does and ZeRO-2 / ZeRO-3 as DDP.
TEST_F(DataParallel, LoraAdaptersTrainAlikeOnTwoRanksAndUnderZero) {
  const auto dir = *dir_ / "lora";
  Config config = config_from_string(tiny_config_text(data(), 1, 60), "lora.toml");
  config.model.lora_rank = 2;
  std::map<int64_t, double> single;
  train_tiny(config, dir / "single_run", nullptr, [&](int64_t step, double loss) { single[step] = loss; });
  const auto ddp = two_ranks(dir, "lora_ddp", config_to_toml(config));
  ASSERT_EQ(ddp.size(), single.size());
  for (const auto& [step, loss] : single) EXPECT_NEAR(ddp.at(step), loss, 1e-5) << "DDP step " << step;
  for (const int stage : {2, 3}) {
    config.distributed.zero_stage = stage;
    const auto zero = two_ranks(dir, fmt::format("lora_zero{}", stage), config_to_toml(config));
    ASSERT_EQ(zero.size(), ddp.size());
    for (const auto& [step, loss] : ddp) EXPECT_NEAR(zero.at(step), loss, 1e-5) << "stage " << stage << " step " << step;
  }
}

// bf16 weights with fp32 master weights on 2 ranks: gradients are summed in fp32 buckets, so ZeRO-1 (masters
// sharded), ZeRO-2 and ZeRO-3 (bf16 branch weights gathered as fp16-typed bits over Gloo) train as DDP does, to the
// bit; ZeRO-2's optimizer shards carry the masters, which consolidate to DDP's. GFlowRL rolls out the bf16 policy
// under ZeRO-3 as under DDP.
TEST_F(DataParallel, Bf16WeightsWithMasterCopiesTrainAlikeUnderEveryZeroStage) {
  const auto dir = *dir_ / "bf16";
  const std::string every_ten = "checkpoint_interval = 10\nkeep_checkpoints = 1\n";
  const std::string bf16 = "[run]\nparam_dtype = \"bf16\"\n";
  const auto ddp = two_ranks(dir, "ddp", tiny_config_text(data(), 2, 60, every_ten) + bf16);
  ASSERT_EQ(ddp.size(), static_cast<size_t>(kSteps));
  const CheckpointData ddp_last = load_checkpoint(dir / "ddp" / "run");
  for (const int stage : {1, 2, 3}) {
    const auto name = fmt::format("zero{}", stage);
    const auto zero = two_ranks(dir, name,
                                tiny_config_text(data(), 2, 60, every_ten, fmt::format("zero_stage = {}\n", stage)) +
                                    bf16);
    ASSERT_EQ(zero.size(), ddp.size());
    for (const auto& [step, loss] : ddp) EXPECT_EQ(zero.at(step), loss) << "stage " << stage << " step " << step;
    CheckpointData last = load_checkpoint(dir / name / "run");
    EXPECT_EQ(max_difference(last.model, ddp_last.model), 0.0) << "stage " << stage;
    consolidate_optimizer_shards(last);
    EXPECT_EQ(max_difference(last.optimizer, ddp_last.optimizer), 0.0) << "stage " << stage;
  }
  size_t masters = 0;
  for (const auto& [key, tensor] : ddp_last.optimizer)
    if (key.size() > 7 && key.compare(key.size() - 7, 7, ".master") == 0) ++masters;
  EXPECT_EQ(masters, ddp_last.model.size());

  Config rl = tiny_rl_config(/*timeout_s=*/60);
  rl.run.param_dtype = FloatFormat::bf16;
  const auto rl_ddp = two_ranks(dir, "rl_ddp", config_to_toml(rl));
  ASSERT_EQ(rl_ddp.size(), 3u);
  rl.distributed.zero_stage = 3;
  const auto rl_zero = two_ranks(dir, "rl_zero3", config_to_toml(rl));
  ASSERT_EQ(rl_zero.size(), rl_ddp.size());
  for (const auto& [step, checksum] : rl_ddp) EXPECT_EQ(rl_zero.at(step), checksum) << "RL step " << step;
}

// A rank that dies mid-run makes the survivor fail with a DistributedError within the timeout, not hang.
TEST_F(DataParallel, DeadRankMakesTheOtherFailWithinTheTimeout) {
  const auto dir = *dir_ / "dead_rank";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "config.toml") << tiny_config_text(data(), 1, /*timeout_s=*/5);
  }
  const auto start = std::chrono::steady_clock::now();
  auto ranks = start_workers(dir, 2, {{"INKSTONE_TEST_EXIT_AT_STEP", "3"}});
  EXPECT_EQ(wait_for(ranks[1], std::chrono::seconds(60)), 3) << read_text(ranks[1].output);
  EXPECT_EQ(wait_for(ranks[0], std::chrono::seconds(30)), kWorkerDistributedError) << read_text(ranks[0].output);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30.0);
  const std::string message = read_text(ranks[0].output);
  // The survivor fails in the first collective after the death: the step-end agreement on stop signals or the
  // next step's gradients.
  EXPECT_NE(message.find("rank 0: "), std::string::npos) << message;
  EXPECT_NE(message.find("all-reduce failed"), std::string::npos) << message;
  EXPECT_NE(message.find("another rank exited"), std::string::npos) << message;
  EXPECT_EQ(read_losses(dir / "losses_rank0.txt").size(), 3u);
}

// `inkstone launch` runs train as two ranks that write one run folder, and forwards a rank's failure.
TEST_F(DataParallel, LaunchRunsTrainAsRanksAndForwardsFailures) {
  const auto dir = *dir_ / "launch";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "config.toml") << tiny_config_text(data(), 1, 60);
  }
  const std::string cli = testing::cli_binary().string();
  Child run = spawn({cli, "launch", "--nproc", "2", "--", "train", (dir / "config.toml").string(), "--run-dir",
                     (dir / "run").string(), "--set", "train.steps=4"},
                    {}, dir / "launch_output.txt");
  ASSERT_EQ(wait_for(run, std::chrono::seconds(120)), 0) << read_text(run.output);
  const std::string output = read_text(run.output);
  EXPECT_NE(output.find("data parallel: 2 ranks"), std::string::npos) << output;
  EXPECT_EQ(load_checkpoint(dir / "run").state.at("world_size"), 2);

  Child failing = spawn({cli, "launch", "--nproc", "2", "--", "train", (dir / "missing.toml").string()}, {},
                        dir / "failing_output.txt");
  EXPECT_EQ(wait_for(failing, std::chrono::seconds(60)), 2);
  const std::string failure = read_text(failing.output);
  EXPECT_NE(failure.find("missing.toml"), std::string::npos) << failure;
  EXPECT_NE(failure.find("launch: rank"), std::string::npos) << failure;
}

// The launch variables: torchrun's, Slurm's, and one-line errors for inconsistent ones.
TEST(LaunchEnv, ReadsTorchrunAndSlurmVariables) {
  const char* names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                         "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "TORCHELASTIC_USE_AGENT_STORE"};
  for (const char* name : names) ::unsetenv(name);
  EXPECT_FALSE(launch_env_from_environment().distributed());

  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  EXPECT_NE(testing::input_error_of([] { launch_env_from_environment(); }).find("MASTER_ADDR"), std::string::npos);
  ::setenv("MASTER_ADDR", "node7", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  LaunchEnv env = launch_env_from_environment();
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_addr, "node7");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_FALSE(env.agent_hosts_store);
  ::setenv("RANK", "4", 1);
  EXPECT_NE(testing::input_error_of([] { launch_env_from_environment(); }).find("RANK='4'"), std::string::npos);
  ::setenv("MASTER_PORT", "http", 1);
  ::setenv("RANK", "0", 1);
  EXPECT_NE(testing::input_error_of([] { launch_env_from_environment(); }).find("MASTER_PORT='http'"),
            std::string::npos);

  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("LOCAL_RANK");
  ::setenv("MASTER_PORT", "29501", 1);
  ::setenv("SLURM_PROCID", "5", 1);
  ::setenv("SLURM_NTASKS", "8", 1);
  ::setenv("SLURM_LOCALID", "1", 1);
  env = launch_env_from_environment();
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  for (const char* name : names) ::unsetenv(name);
}

}  // namespace
}  // namespace inkstone
