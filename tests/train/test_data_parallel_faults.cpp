// The faults of a data-parallel run, as one table (docs/reliability.md, "Faults of a data-parallel run"): each row
// starts `inkstone launch --nproc 2 -- train` on a ZeRO-2 run, injects one fault into one rank, and checks how the
// launch ends (exit code, one `error:` line per failed rank, the rank named, the time to exit), that no half-written
// checkpoint became one, and that `--resume` on 2 ranks ends bitwise where an uninterrupted run ends.
//
// Faults are placed while both ranks are stopped (SIGSTOP, once rank 0 has logged 3 steps), then the ranks go on. A
// write in progress is held by a FIFO at the path the rank's atomic writer opens (open blocks until a reader comes),
// a full disk is a file-size limit set on the running rank (`prlimit`; inkstone ignores SIGXFSZ, so the write fails
// with EFBIG as it would with ENOSPC), a hung rank is a stopped one.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

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
constexpr int kKeepCheckpoints = 3;
constexpr double kHungRankTimeoutS = 3;  // the hung-rank row's distributed.timeout_s; every other run has 60

// ZeRO-2 (every rank writes its optimizer shard), a checkpoint every 2 steps, 40 steps of 8 rows of 16 tokens.
std::string fault_run_config(const fs::path& data) {
  return fmt::format(
      "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\nmax_seq_len = 32\n"
      "[data]\npath = \"{}\"\nseq_len = 16\n"
      "[optim]\nlearning_rate = 3e-3\n"
      "[train]\nsteps = {}\nbatch_size = 8\nlog_interval = 1\neval_interval = 0\neval_batches = 1\n"
      "checkpoint_interval = {}\nkeep_checkpoints = {}\n"
      "[distributed]\nzero_stage = 2\ntimeout_s = 60\n",
      data.string(), kFaultRunSteps, kCheckpointEvery, kKeepCheckpoints);
}

// The launcher's child that has RANK=<rank> in its environment (it has exec'd inkstone); -1 while there is none.
pid_t rank_process(pid_t launcher, int rank) {
  const std::string variable = fmt::format("RANK={}", rank);
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string pid, command, state;
    pid_t parent = 0;
    if (!(stat >> pid >> command >> state >> parent) || parent != launcher) continue;
    const std::string environment = '\0' + testing::read_text(entry.path() / "environ");
    if (environment.find('\0' + variable + '\0') != std::string::npos) return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

// `inkstone launch --nproc N -- train CONFIG --run-dir RUN [--resume] [extra...]`, and (with find_ranks) the ranks'
// process ids. Whatever a failed assertion leaves running is killed on destruction: the ranks (a stopped one
// included) and the launcher.
class LaunchedRun {
 public:
  LaunchedRun(const fs::path& config, const fs::path& run, const fs::path& output, bool resume, int nproc,
              const std::vector<std::string>& extra, bool find_ranks) {
    std::vector<std::string> argv = {testing::cli_binary().string(), "launch", "--nproc", std::to_string(nproc),
                                     "--grace", "2", "--", "train", config.string(), "--run-dir", run.string()};
    if (resume) argv.push_back("--resume");
    argv.insert(argv.end(), extra.begin(), extra.end());
    launcher_ = testing::spawn(argv, {}, output);
    if (!find_ranks) return;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (int rank = 0; rank < nproc; ++rank) {
      pid_t pid = -1;
      while ((pid = rank_process(launcher_.pid, rank)) < 0 && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ranks_.push_back(pid);
    }
  }
  LaunchedRun(const LaunchedRun&) = delete;
  LaunchedRun& operator=(const LaunchedRun&) = delete;
  ~LaunchedRun() {
    if (exited_) return;
    for (pid_t pid : ranks_)
      if (pid > 0) ::kill(pid, SIGKILL);
    ::kill(launcher_.pid, SIGKILL);
    ::waitpid(launcher_.pid, nullptr, 0);
  }

  // The launcher's exit code; -1 when it was still running after `limit` (then it is killed).
  int wait(std::chrono::seconds limit) {
    const int code = testing::wait_for(launcher_, limit);
    exited_ = code >= 0;
    return code;
  }
  bool found_every_rank() const {
    return !ranks_.empty() && std::all_of(ranks_.begin(), ranks_.end(), [](pid_t pid) { return pid > 0; });
  }
  pid_t rank(int r) const { return ranks_.at(static_cast<size_t>(r)); }
  void signal_ranks(int signal) const {
    for (pid_t pid : ranks_)
      if (pid > 0) ::kill(pid, signal);
  }

 private:
  testing::Child launcher_;
  std::vector<pid_t> ranks_;
  bool exited_ = false;
};

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

// Lets the run log 3 steps, then stops both ranks (SIGSTOP) so that the fault is placed while neither moves; returns
// the last logged step (the ranks may be a step or two further). The injection continues them with SIGCONT.
int64_t pause_both(const LaunchedRun& launched, const fs::path& run) {
  EXPECT_TRUE(wait_until([&] { return logged_steps(run) >= 3; })) << "the run never logged 3 steps";
  launched.signal_ranks(SIGSTOP);
  return logged_steps(run);
}

std::string step_folder(int64_t step) { return fmt::format("step_{:06d}", step); }

fs::path staging_folder(const fs::path& run, int64_t step) {
  return run / "checkpoints" / fmt::format(".{}.shards", step_folder(step));
}

// The limit on the size of any file `pid` writes (RLIMIT_FSIZE, as `ulimit -f`): the disk of that rank is full.
bool fill_disk_of(pid_t pid, rlim_t bytes) {
  const rlimit limit{bytes, bytes};
  return ::prlimit(pid, RLIMIT_FSIZE, &limit, nullptr) == 0;
}

// The launch's output for the table: its `error:` and `launch:` lines, joined.
std::string what_was_said(const std::string& output) {
  std::istringstream lines(output);
  std::string said;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("error: ", 0) == 0 || line.rfind("launch: ", 0) == 0) said += (said.empty() ? "" : " / ") + line;
  return said;
}

// The step whose staged shards a failed write names (".step_000004.shards/..."), if any.
std::optional<int64_t> staged_step_named(const std::string& output) {
  static const std::regex staged(R"(\.step_0*(\d+)\.shards)");
  std::smatch found;
  if (!std::regex_search(output, found, staged)) return std::nullopt;
  return std::stoll(found[1].str());
}

size_t error_lines(const std::string& output) {
  size_t count = 0;
  for (size_t at = output.find("error: "); at != std::string::npos; at = output.find("error: ", at + 1)) ++count;
  return count;
}

// One `error:` line per rank that ended by itself at most, at least one, and no C++ or libtorch stack dump.
void expect_clean_refusal(const std::string& told, size_t most_error_lines) {
  EXPECT_GE(error_lines(told), 1u) << told;
  EXPECT_LE(error_lines(told), most_error_lines) << told;
  EXPECT_EQ(told.find("terminate called"), std::string::npos) << told;
  EXPECT_EQ(told.find("Exception raised from"), std::string::npos) << told;
}

// A fault placed into a running launch; returns the step whose checkpoint it interrupted, when it knows it.
using Injection = std::function<std::optional<int64_t>(const LaunchedRun&, const fs::path& run)>;

struct FaultRow {
  std::string fault;
  Injection inject;  // empty: a resume row, whose fault `damage` puts into a copy of the finished run first
  std::function<void(const fs::path& checkpoint)> damage;
  std::vector<std::string> extra;  // more arguments of the launch
  int exit_code;                   // launch's
  std::vector<std::string> told;   // each must appear in the launch's output
  size_t error_lines;              // at most one `error:` line per rank that ends by itself (a killed one prints none)
  double max_seconds;              // from the fault to the launch's exit
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

// A copy of the finished run cut back to its oldest kept checkpoint, so that resuming it has steps left to train.
fs::path unfinished_copy(const fs::path& finished_run, const fs::path& copy) {
  fs::copy(finished_run, copy, fs::copy_options::recursive);
  fs::remove(copy / ".lock");
  for (int64_t step = kFaultRunSteps; step > kFaultRunSteps - (kKeepCheckpoints - 1) * kCheckpointEvery;
       step -= kCheckpointEvery)
    fs::remove_all(copy / "checkpoints" / step_folder(step));
  return copy;
}

// Every line of the fault table (the issue's list): the outcome, the time to exit, and a bitwise resume.
TEST_F(DataParallelFaults, EveryFaultEndsTheRunInBoundedTimeAndResumesBitwise) {
  const fs::path config = *dir_ / "config.toml";
  // The uninterrupted run every resumed one must equal, bit for bit.
  const fs::path reference_run = *dir_ / "reference";
  {
    LaunchedRun reference(config, reference_run, *dir_ / "reference.txt", false, 2, {}, false);
    ASSERT_EQ(reference.wait(std::chrono::seconds(180)), 0) << testing::read_text(*dir_ / "reference.txt");
  }
  const CheckpointData finished = load_checkpoint(reference_run);
  ASSERT_EQ(finished.step, kFaultRunSteps);
  ASSERT_EQ(finished.optimizer_shards, 2);
  const std::string rank1_shard = optimizer_shard_file(1, 2);
  const auto shard_bytes = fs::file_size(finished.folder / rank1_shard);
  // Larger than anything else a rank writes before its checkpoint (the launch output, metrics.jsonl).
  const rlim_t full_at = 64 << 10;
  ASSERT_GT(shard_bytes, full_at);

  const auto killed = [](const LaunchedRun& l, const fs::path& run) -> std::optional<int64_t> {
    pause_both(l, run);
    ::kill(l.rank(1), SIGKILL);
    ::kill(l.rank(0), SIGCONT);
    return std::nullopt;
  };
  const auto killed_while_writing = [&](const LaunchedRun& l, const fs::path& run) -> std::optional<int64_t> {
    // The first checkpoint at least 4 steps after the log: the ranks cannot have reached it.
    const int64_t step = (pause_both(l, run) + 4 + kCheckpointEvery - 1) / kCheckpointEvery * kCheckpointEvery;
    EXPECT_LT(step, kFaultRunSteps) << "the run is too short for the fault";
    // Rank 1's shard write is held at its open (a FIFO where its temporary file goes); rank 0 stages its own shard
    // and waits at the barrier; then rank 1 dies.
    const fs::path held = staging_folder(run, step) / fmt::format("{}.tmp-{}", rank1_shard, l.rank(1));
    fs::create_directories(held.parent_path());
    EXPECT_EQ(::mkfifo(held.c_str(), 0600), 0);
    l.signal_ranks(SIGCONT);
    EXPECT_TRUE(wait_until([&] { return fs::exists(staging_folder(run, step) / optimizer_shard_file(0, 2)); }));
    ::kill(l.rank(1), SIGKILL);
    fs::remove(held);
    return step;
  };
  const auto disk_full_on = [&](int rank) {
    return [&, rank](const LaunchedRun& l, const fs::path& run) -> std::optional<int64_t> {
      pause_both(l, run);
      EXPECT_TRUE(fill_disk_of(l.rank(rank), full_at));
      l.signal_ranks(SIGCONT);
      return std::nullopt;
    };
  };
  const auto hung = [](const LaunchedRun& l, const fs::path& run) -> std::optional<int64_t> {
    pause_both(l, run);
    ::kill(l.rank(0), SIGCONT);
    return std::nullopt;
  };
  const std::vector<std::string> short_timeout = {"--set",
                                                  fmt::format("distributed.timeout_s={}", kHungRankTimeoutS)};
  const std::vector<FaultRow> rows = {
      {"kill -9 of rank 1 during a step", killed, {}, {}, 128 + SIGKILL,
       {"launch: rank 1 was killed by signal 9", "error: rank 0: "}, 1, 30},
      {"kill -9 of rank 1 during its checkpoint shard write", killed_while_writing, {}, {}, 128 + SIGKILL,
       {"launch: rank 1 was killed by signal 9", "error: rank 0: "}, 1, 30},
      {"full disk on rank 1 (its shard write fails)", disk_full_on(1), {}, {}, 1,
       {"error: rank 1: cannot write", "File too large"}, 2, 30},
      {"full disk on rank 0 (its checkpoint write fails)", disk_full_on(0), {}, {}, 1,
       {"error: rank 0: cannot write", "File too large"}, 2, 30},
      {"rank 1 hung (stopped): the collective times out", hung, {}, short_timeout, 1,
       {fmt::format("distributed.timeout_s = {} s", kHungRankTimeoutS), "launch: rank 0 exited with code 1"}, 1,
       kHungRankTimeoutS + 2 + 15},
      // Both ranks verify every shard; whichever refuses first is named (launch stops the other, which may end
      // before it prints).
      {"rank 1's optimizer shard missing at resume", {},
       [&](const fs::path& checkpoint) { fs::remove(checkpoint / rank1_shard); }, {}, 2,
       {rank1_shard + ": missing from the checkpoint"}, 2, 30},
      {"rank 1's optimizer shard corrupted at resume", {},
       [&](const fs::path& checkpoint) {
         std::fstream shard(checkpoint / rank1_shard, std::ios::in | std::ios::out | std::ios::binary);
         shard.seekg(static_cast<std::streamoff>(shard_bytes / 2));
         const char byte = static_cast<char>(shard.get() ^ 0x5a);
         shard.seekp(static_cast<std::streamoff>(shard_bytes / 2));
         shard.put(byte);
       },
       {}, 2, {rank1_shard + ": corrupt"}, 2, 30},
  };

  std::string table = "| fault | ranks | outcome | time to exit | resumed bitwise |\n|---|---|---|---|---|\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const FaultRow& row = rows[i];
    SCOPED_TRACE(row.fault);
    const fs::path run = *dir_ / fmt::format("row{}", i), output = *dir_ / fmt::format("row{}.txt", i);
    std::optional<int64_t> interrupted, newest_before;
    Clock::time_point fault_at;
    int exit_code = -1;
    if (row.inject) {
      LaunchedRun launched(config, run, output, false, 2, row.extra, true);
      ASSERT_TRUE(launched.found_every_rank()) << testing::read_text(output);
      interrupted = row.inject(launched, run);
      fault_at = Clock::now();
      exit_code = launched.wait(std::chrono::seconds(120));
    } else {
      unfinished_copy(reference_run, run);
      newest_before = load_checkpoint(run, CheckpointParts::description).step;
      row.damage(*latest_checkpoint(run));
      fault_at = Clock::now();
      LaunchedRun launched(config, run, output, true, 2, row.extra, false);
      exit_code = launched.wait(std::chrono::seconds(120));
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - fault_at).count();
    const std::string told = testing::read_text(output);
    EXPECT_EQ(exit_code, row.exit_code) << told;
    for (const auto& words : row.told) EXPECT_NE(told.find(words), std::string::npos) << words << "\n" << told;
    expect_clean_refusal(told, row.error_lines);
    EXPECT_LT(seconds, row.max_seconds) << told;

    std::string resumed = "n/a";
    if (row.inject) {
      // Every checkpoint left is whole (state.json and every file it records verify); the one the fault interrupted
      // never became one, so the newest is older.
      for (const auto& entry : fs::directory_iterator(run / "checkpoints"))
        if (entry.path().filename().string().rfind("step_", 0) == 0) EXPECT_NO_THROW(load_checkpoint(entry.path()));
      const int64_t newest = load_checkpoint(run).step;
      if (!interrupted) interrupted = staged_step_named(told);
      if (interrupted) {
        EXPECT_FALSE(fs::exists(run / "checkpoints" / step_folder(*interrupted))) << *interrupted;
        EXPECT_LT(newest, *interrupted);
      }
      EXPECT_LT(newest, kFaultRunSteps);
      const fs::path resume_output = *dir_ / fmt::format("row{}_resume.txt", i);
      LaunchedRun again(config, run, resume_output, true, 2, {}, false);
      EXPECT_EQ(again.wait(std::chrono::seconds(180)), 0) << testing::read_text(resume_output);
      const CheckpointData last = load_checkpoint(run);
      EXPECT_EQ(last.step, kFaultRunSteps);
      const double difference = testing::max_difference(last.model, finished.model);
      EXPECT_EQ(difference, 0.0);
      resumed = difference == 0.0 ? fmt::format("yes, from step {}", newest) : fmt::format("no ({:.3g})", difference);
    } else {
      EXPECT_EQ(load_checkpoint(run, CheckpointParts::description).step, *newest_before);
    }
    table += fmt::format("| {} | 2 | exit {}; {} | {:.1f} s | {} |\n", row.fault, exit_code, what_was_said(told),
                         seconds, resumed);
  }

  // Another world size: one process cannot resume 2 ZeRO shards, and is told how to consolidate them.
  {
    const fs::path output = *dir_ / "world_size.txt";
    const fs::path run = unfinished_copy(reference_run, *dir_ / "world_size");
    const auto started = Clock::now();
    LaunchedRun one(config, run, output, true, 1, {}, false);
    EXPECT_EQ(one.wait(std::chrono::seconds(120)), 2);
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    const std::string told = testing::read_text(output);
    EXPECT_NE(told.find("inkstone checkpoint consolidate"), std::string::npos) << told;
    expect_clean_refusal(told, 1);
    EXPECT_LT(seconds, 30.0) << told;
    table += fmt::format("| resume on 1 rank from 2 ZeRO shards | 1 | exit 2; {} | {:.1f} s | n/a |\n",
                         what_was_said(told), seconds);
  }
  std::printf("%s", table.c_str());
}

}  // namespace
}  // namespace inkstone
