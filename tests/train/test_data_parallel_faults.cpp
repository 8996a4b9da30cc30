// The faults of a data-parallel run, as one table (docs/reliability.md, "Faults of a data-parallel run"): each row
// starts `inkstone launch --nproc 2 -- train` on a ZeRO-2 run, injects one fault into one rank, and checks how the
// launch ends (exit code, one `error:` line per failed rank, the rank named, the time to exit), that no half-written
// checkpoint became one, and that `--resume` on 2 ranks ends bitwise where an uninterrupted run ends.
//
// Faults are placed deterministically: both ranks are stopped (SIGSTOP) after a few steps, the fault is set up, and
// they continue. A write in progress is held by a FIFO at the path the rank's atomic writer opens (open blocks until
// a reader comes), a full disk is a file-size limit set on the running rank (`prlimit`; inkstone ignores SIGXFSZ,
// so the write fails with EFBIG as it would with ENOSPC), a hung rank is a stopped one.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint.h"
#include "tests/fixtures.h"
#include "tests/test_paths.h"
#include "tests/train/rank_processes.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int64_t kFaultRunSteps = 40;
constexpr int kCheckpointEvery = 2;
constexpr double kCollectiveTimeoutS = 3;

// ZeRO-2 (every rank writes its optimizer shard), a checkpoint every 2 steps, 40 steps of 8 rows of 16 tokens.
std::string fault_run_config(const fs::path& data) {
  return fmt::format(
      "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\nmax_seq_len = 32\n"
      "[data]\npath = \"{}\"\nseq_len = 16\n"
      "[optim]\nlearning_rate = 3e-3\n"
      "[train]\nsteps = {}\nbatch_size = 8\nlog_interval = 1\neval_interval = 0\neval_batches = 1\n"
      "checkpoint_interval = {}\nkeep_checkpoints = 3\n"
      "[distributed]\nzero_stage = 2\ntimeout_s = {}\n",
      data.string(), kFaultRunSteps, kCheckpointEvery, kCollectiveTimeoutS);
}

// A launch of `inkstone train` on 2 ranks and the ranks' process ids.
struct LaunchedRun {
  testing::Child launcher;
  std::vector<pid_t> ranks;
};

// The launcher's child that has RANK=<rank> in its environment (it has exec'd inkstone); -1 while there is none.
pid_t rank_process(pid_t launcher, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string pid, command, state;
    pid_t parent = 0;
    if (!(stat >> pid >> command >> state >> parent) || parent != launcher) continue;
    const std::string environment = testing::read_text(entry.path() / "environ");
    if (environment.find(fmt::format("RANK={}", rank) + '\0') == 0 ||
        environment.find('\0' + fmt::format("RANK={}", rank) + '\0') != std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

LaunchedRun launch_training(const fs::path& config, const fs::path& run, const fs::path& output, bool resume,
                            int nproc = 2) {
  std::vector<std::string> argv = {testing::cli_binary().string(), "launch", "--nproc", std::to_string(nproc),
                                   "--grace", "2", "--", "train", config.string(), "--run-dir", run.string()};
  if (resume) argv.push_back("--resume");
  LaunchedRun launched{testing::spawn(argv, {}, output), {}};
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (int rank = 0; rank < nproc; ++rank) {
    pid_t pid = -1;
    while ((pid = rank_process(launched.launcher.pid, rank)) < 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    launched.ranks.push_back(pid);
  }
  return launched;
}

// The steps rank 0 has logged so far.
int64_t logged_steps(const fs::path& run) {
  std::ifstream metrics(run / "metrics.jsonl");
  int64_t steps = 0;
  for (std::string line; std::getline(metrics, line);)
    if (line.find("\"split\":\"train\"") != std::string::npos) ++steps;
  return steps;
}

// Waits (at most a minute) for `ready`; false when it never came.
bool wait_until(const std::function<bool()>& ready) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!ready()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

void signal_all(const std::vector<pid_t>& pids, int signal) {
  for (pid_t pid : pids) ::kill(pid, signal);
}

// What a fault does to a running launch, given the run folder; returns when the fault is in place.
using Injection = std::function<void(const LaunchedRun&, const fs::path& run)>;

// Lets the run log `steps` steps, then stops both ranks (SIGSTOP) so that a fault can be placed between two known
// steps; returns the last logged step. The ranks continue when the injection sends SIGCONT.
int64_t pause_after(const LaunchedRun& launched, const fs::path& run, int64_t steps) {
  EXPECT_TRUE(wait_until([&] { return logged_steps(run) >= steps; })) << "the run never logged " << steps << " steps";
  signal_all(launched.ranks, SIGSTOP);
  return logged_steps(run);
}

// The first checkpoint step at least 4 steps after `logged` (the ranks run at most a step or two ahead of the log).
int64_t checkpoint_after(int64_t logged) {
  const int64_t step = (logged + 4 + kCheckpointEvery - 1) / kCheckpointEvery * kCheckpointEvery;
  EXPECT_LT(step, kFaultRunSteps) << "the run is too short for the fault";
  return step;
}

std::string step_folder(int64_t step) { return fmt::format("step_{:06d}", step); }

// The limit on the size of any file `pid` writes (RLIMIT_FSIZE, as `ulimit -f`): the disk of that rank is full.
void fill_disk_of(pid_t pid, rlim_t bytes) {
  const rlimit limit{bytes, bytes};
  ASSERT_EQ(::prlimit(pid, RLIMIT_FSIZE, &limit, nullptr), 0) << "prlimit of " << pid;
}

// The launch's output for the table: its `error:` and `launch:` lines, joined.
std::string what_was_said(const std::string& output) {
  std::istringstream lines(output);
  std::string said;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("error: ", 0) == 0 || line.rfind("launch: ", 0) == 0) said += (said.empty() ? "" : " / ") + line;
  return said;
}

struct FaultRow {
  std::string fault;
  Injection inject;          // empty: the fault is in the run folder before the launch (a resume)
  std::function<void(const fs::path& run)> damage;  // for resume rows: what is done to the run folder first
  int exit_code;             // launch's
  std::vector<std::string> told;  // each must appear in the launch's output
  int error_lines;           // at most one `error:` line per rank that ends by itself (a killed rank prints none)
  double max_seconds;        // from the fault to the launch's exit
  bool resumes;              // --resume afterwards must end bitwise where the uninterrupted run ends
};

class DataParallelFaults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::temp_dir("data_parallel_faults"));
    testing::prepare_word_corpus(*dir_);
    std::ofstream(*dir_ / "config.toml") << fault_run_config(*dir_ / "data");
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path* dir_;
};
fs::path* DataParallelFaults::dir_ = nullptr;

// Every line of the fault table (the list): the outcome, the time to exit, and a bitwise resume.
TEST_F(DataParallelFaults, EveryFaultEndsTheRunInBoundedTimeAndResumesBitwise) {
  const fs::path config = *dir_ / "config.toml";
  // The uninterrupted run every resumed one must equal, bit for bit.
  const fs::path reference_run = *dir_ / "reference";
  {
    const LaunchedRun reference = launch_training(config, reference_run, *dir_ / "reference.txt", false);
    ASSERT_EQ(testing::wait_for(reference.launcher, std::chrono::seconds(180)), 0)
        << testing::read_text(*dir_ / "reference.txt");
  }
  const CheckpointData finished = load_checkpoint(reference_run);
  ASSERT_EQ(finished.step, kFaultRunSteps);
  ASSERT_EQ(finished.optimizer_shards, 2);
  const std::string rank1_shard = optimizer_shard_file(1, 2);
  const auto shard_bytes = fs::file_size(finished.folder / rank1_shard);
  // Larger than anything else a rank writes before its checkpoint (the launch output, metrics.jsonl).
  const rlim_t full_at = 64 << 10;
  ASSERT_GT(shard_bytes, full_at);

  const std::vector<FaultRow> rows = {
      {"kill -9 of rank 1 during a step",
       [](const LaunchedRun& l, const fs::path& run) {
         pause_after(l, run, 3);
         ::kill(l.ranks[1], SIGKILL);
         ::kill(l.ranks[0], SIGCONT);
       },
       {}, 128 + SIGKILL, {"launch: rank 1 was killed by signal 9", "error: rank 0: "}, 1, 30, true},
      {"kill -9 of rank 1 during a sharded checkpoint write",
       [&](const LaunchedRun& l, const fs::path& run) {
         const int64_t step = checkpoint_after(pause_after(l, run, 3));
         // Rank 1's shard is held open in its temporary file; rank 0 stages its own and waits at the barrier.
         const fs::path staged = run / "checkpoints" / fmt::format(".{}.shards", step_folder(step));
         fs::create_directories(staged);
         const fs::path held = staged / fmt::format("{}.tmp-{}", rank1_shard, l.ranks[1]);
         ASSERT_EQ(::mkfifo(held.c_str(), 0600), 0);
         signal_all(l.ranks, SIGCONT);
         ASSERT_TRUE(wait_until([&] { return fs::exists(staged / optimizer_shard_file(0, 2)); }));
         ::kill(l.ranks[1], SIGKILL);
       },
       {}, 128 + SIGKILL, {"launch: rank 1 was killed by signal 9", "error: rank 0: "}, 1, 30, true},
      {"full disk on rank 1 (its shard write fails)",
       [&](const LaunchedRun& l, const fs::path& run) {
         pause_after(l, run, 3);
         fill_disk_of(l.ranks[1], full_at);
         signal_all(l.ranks, SIGCONT);
       },
       {}, 1, {"error: rank 1: cannot write", "File too large"}, 2, 30, true},
      {"full disk on rank 0 (its checkpoint write fails)",
       [&](const LaunchedRun& l, const fs::path& run) {
         pause_after(l, run, 3);
         fill_disk_of(l.ranks[0], full_at);
         signal_all(l.ranks, SIGCONT);
       },
       {}, 1, {"error: rank 0: cannot write", "File too large"}, 2, 30, true},
      {"rank 1 hung (stopped): the collective times out",
       [](const LaunchedRun& l, const fs::path& run) {
         pause_after(l, run, 3);
         ::kill(l.ranks[0], SIGCONT);
       },
       {}, 1, {fmt::format("distributed.timeout_s = {} s", kCollectiveTimeoutS), "launch: rank 0 exited with code 1"},
       1, kCollectiveTimeoutS + 2 + 15, true},
      {"rank 1's optimizer shard missing at resume", {},
       [&](const fs::path& run) { fs::remove(*latest_checkpoint(run) / rank1_shard); }, 2,
       {"error: rank 1: ", rank1_shard + ": missing from the checkpoint"}, 2, 30, false},
      {"rank 1's optimizer shard corrupted at resume", {},
       [&](const fs::path& run) {
         std::fstream shard(*latest_checkpoint(run) / rank1_shard, std::ios::in | std::ios::out | std::ios::binary);
         shard.seekg(static_cast<std::streamoff>(shard_bytes / 2));
         const char byte = static_cast<char>(shard.get() ^ 0x5a);
         shard.seekp(static_cast<std::streamoff>(shard_bytes / 2));
         shard.put(byte);
       },
       2, {"error: rank 1: ", rank1_shard + ": corrupt"}, 2, 30, false},
  };

  std::string table = "| fault | ranks | outcome | time to exit | resumed bitwise |\n|---|---|---|---|---|\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const FaultRow& row = rows[i];
    SCOPED_TRACE(row.fault);
    const fs::path run = *dir_ / fmt::format("row{}", i), output = *dir_ / fmt::format("row{}.txt", i);
    std::optional<int64_t> newest_before;
    Clock::time_point fault_at;
    int exit_code = -1;
    if (row.inject) {
      const LaunchedRun launched = launch_training(config, run, output, false);
      ASSERT_GT(launched.ranks[1], 0) << testing::read_text(output);
      row.inject(launched, run);
      fault_at = Clock::now();
      exit_code = testing::wait_for(launched.launcher, std::chrono::seconds(120));
    } else {
      fs::copy(reference_run, run, fs::copy_options::recursive);
      fs::remove(run / ".lock");
      row.damage(run);
      newest_before = load_checkpoint(*latest_checkpoint(run), CheckpointParts::description).step;
      fault_at = Clock::now();
      const LaunchedRun launched = launch_training(config, run, output, true);
      exit_code = testing::wait_for(launched.launcher, std::chrono::seconds(120));
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - fault_at).count();
    const std::string told = testing::read_text(output);
    EXPECT_EQ(exit_code, row.exit_code) << told;
    for (const auto& words : row.told) EXPECT_NE(told.find(words), std::string::npos) << words << "\n" << told;
    size_t error_lines = 0;
    for (size_t at = told.find("error: "); at != std::string::npos; at = told.find("error: ", at + 1)) ++error_lines;
    EXPECT_GE(error_lines, 1u) << told;
    EXPECT_LE(error_lines, static_cast<size_t>(row.error_lines)) << told;
    EXPECT_EQ(told.find("terminate called"), std::string::npos) << told;
    EXPECT_EQ(told.find("Exception raised from"), std::string::npos) << told;
    EXPECT_LT(seconds, row.max_seconds) << told;

    // Every checkpoint left is whole (state.json and every file it records verify), and none is newer than the
    // last one the run completed before the fault.
    std::string resumed = "n/a";
    if (row.resumes) {
      for (const auto& entry : fs::directory_iterator(run / "checkpoints"))
        if (entry.path().filename().string().rfind("step_", 0) == 0) EXPECT_NO_THROW(load_checkpoint(entry.path()));
      const int64_t newest = load_checkpoint(*latest_checkpoint(run)).step;
      EXPECT_LT(newest, kFaultRunSteps);
      const fs::path resume_output = *dir_ / fmt::format("row{}_resume.txt", i);
      const LaunchedRun again = launch_training(config, run, resume_output, true);
      EXPECT_EQ(testing::wait_for(again.launcher, std::chrono::seconds(180)), 0) << testing::read_text(resume_output);
      const CheckpointData last = load_checkpoint(run);
      EXPECT_EQ(last.step, kFaultRunSteps);
      const double difference = testing::max_difference(last.model, finished.model);
      EXPECT_EQ(difference, 0.0);
      resumed = difference == 0.0 ? fmt::format("yes, from step {}", newest) : fmt::format("no ({:.3g})", difference);
    } else {
      EXPECT_EQ(load_checkpoint(*latest_checkpoint(run), CheckpointParts::description).step, *newest_before);
    }
    table += fmt::format("| {} | 2 | exit {}; {} | {:.1f} s | {} |\n", row.fault, exit_code, what_was_said(told),
                         seconds, resumed);
  }

  // Another world size: one process cannot resume 2 ZeRO shards, and is told how to consolidate them.
  {
    const fs::path output = *dir_ / "world_size.txt";
    const fs::path run = *dir_ / "world_size";
    fs::copy(reference_run, run, fs::copy_options::recursive);
    fs::remove(run / ".lock");
    const auto started = Clock::now();
    const LaunchedRun one = launch_training(config, run, output, true, 1);
    EXPECT_EQ(testing::wait_for(one.launcher, std::chrono::seconds(120)), 2);
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    const std::string told = testing::read_text(output);
    EXPECT_NE(told.find("inkstone checkpoint consolidate"), std::string::npos) << told;
    table += fmt::format("| resume on 1 rank from 2 ZeRO shards | 1 | exit 2; refused with the consolidate command | "
                         "{:.1f} s | n/a |\n", seconds);
  }
  std::printf("%s", table.c_str());
}

}  // namespace
}  // namespace inkstone
