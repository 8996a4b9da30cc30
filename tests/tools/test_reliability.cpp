// What a run promises when things go wrong (docs/reliability.md): one writer per run folder, no non-finite
// checkpoint, no NaN or infinite setting, and a signal that stops a run after a checkpoint it resumes from.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "checkpoint/module_weights.h"
#include "config/config.h"
#include "core/errors.h"
#include "core/run_lock.h"
#include "dataset/prompt_format.h"
#include "sampler/ar_sampler.h"
#include "sampler/text_samples.h"
#include "tests/cli_run.h"
#include "tests/fixtures.h"
#include "tools/run_setup.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

// A tiny AR run on the word corpus; `steps` long, a log line every step, checkpoints only at the end.
fs::path write_tiny_config(const fs::path& dir, int64_t steps) {
  const auto data = testing::prepare_word_corpus(dir);
  const auto path = dir / "tiny.toml";
  std::ofstream(path) << "[run]\nthreads = 1\ndevice = \"cpu\"\n"
                      << "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\nmax_seq_len = 32\n"
                      << "[data]\npath = \"" << data.string() << "\"\nseq_len = 16\n"
                      << "[train]\nsteps = " << steps << "\nbatch_size = 4\nlog_interval = 1\neval_interval = 0\n"
                      << "checkpoint_interval = 0\n";
  return path;
}

TEST(RunLock, ASecondWriterIsRefusedNamingTheHolder) {
  const auto dir = testing::temp_dir("run_lock");
  {
    RunLock first(dir / "run");
    const auto message = testing::input_error_of([&] { RunLock second(dir / "run"); });
    EXPECT_NE(message.find("is in use by pid " + std::to_string(::getpid())), std::string::npos) << message;
    // The CLI refuses too, before it writes anything.
    const auto config = write_tiny_config(dir, 2);
    const auto result = run_cli({"train", config.string(), "--run-dir", (dir / "run").string()});
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_NE(result.output.find("is in use by pid"), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(dir / "run" / "config.toml"));
  }
  EXPECT_NO_THROW(RunLock again(dir / "run"));  // released with its holder
  fs::remove_all(dir);
}

TEST(FiniteCheckpoints, ANonFiniteTensorIsNeverWritten) {
  const auto dir = testing::temp_dir("finite_checkpoint");
  CheckpointData data;
  data.step = 3;
  data.model = {{"a", torch::ones({4})}, {"b", torch::tensor({1.0f, std::nanf(""), 2.0f})}};
  try {
    save_checkpoint(dir, data, 0);
    ADD_FAILURE() << "a NaN weight was written";
  } catch (const NonFiniteError& e) {
    EXPECT_NE(std::string(e.what()).find("model tensor 'b'"), std::string::npos) << e.what();
  }
  data.model = {{"a", torch::ones({4})}};
  data.optimizer = {{"a.exp_avg_sq", torch::tensor({INFINITY})}};
  EXPECT_THROW(save_checkpoint(dir, data, 0), NonFiniteError);
  EXPECT_FALSE(latest_checkpoint(dir).has_value());
  fs::remove_all(dir);
}

// optim.eps = 0 divides the zero moments of unused embedding rows (untied, so the head does not reach them) by
// zero: the first update writes NaN weights.
TEST(FiniteCheckpoints, AnUpdateThatMakesWeightsNonFiniteEndsTheRunBeforeItsCheckpoint) {
  const auto dir = testing::temp_dir("non_finite_update");
  const auto config = write_tiny_config(dir, 5);
  const auto result = run_cli({"train", config.string(), "--run-dir", (dir / "run").string(), "--set", "optim.eps=0",
                                "--set", "model.tie_embeddings=false"});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("the update of step 1 made weights NaN or inf"), std::string::npos) << result.output;
  EXPECT_FALSE(latest_checkpoint(dir / "run").has_value());
  fs::remove_all(dir);
}

TEST(FiniteSettings, NanAndInfinityAreRefusedByKey) {
  for (const std::string value : {"nan", "inf", "-inf"}) {
    const auto message = testing::input_error_of(
        [&] { config_from_string("", "cfg.toml", {"optim.learning_rate=" + value}); });
    EXPECT_NE(message.find("optim.learning_rate"), std::string::npos) << value << ": " << message;
    EXPECT_NE(message.find("finite"), std::string::npos) << message;
  }
}

// An empty stop string would end every completion after its first token: refused by key.
TEST(FiniteSettings, AnEmptyStopStringIsRefusedByKey) {
  const auto message = testing::input_error_of(
      [&] { config_from_string("", "cfg.toml", {"rl.stop=[\"=\", \"\"]"}); });
  EXPECT_NE(message.find("key 'rl.stop'"), std::string::npos) << message;
  EXPECT_NE(message.find("empty string at position 2"), std::string::npos) << message;
  EXPECT_NO_THROW(config_from_string("", "cfg.toml", {"rl.stop=[\"=\"]"}));
}

// A resumed run is the same run: a change to what it is (objective, data shape, optimizer) is refused by key before
// anything trains; a longer run or another cadence is taken and logged; a finished run is refused.
TEST(ResumeChecks, AChangeOfMeaningIsRefusedAndACampaignChangeIsLogged) {
  const auto dir = testing::temp_dir("resume_checks");
  const auto config = write_tiny_config(dir, 2);
  const auto run = (dir / "run").string();
  ASSERT_EQ(run_cli({"train", config.string(), "--run-dir", run}).exit_code, 0);
  for (const std::string change : {"objective.name=uniform_diffusion", "data.seq_len=8", "train.batch_size=8",
                                   "optim.beta2=0.99", "run.seed=7"}) {
    const auto result = run_cli({"train", config.string(), "--run-dir", run, "--resume", "--set", change});
    EXPECT_EQ(result.exit_code, 2) << change << ": " << result.output;
    const std::string key = change.substr(0, change.find('='));
    EXPECT_NE(result.output.find("checkpoint step 2 was trained with " + key + " = "), std::string::npos)
        << result.output;
    EXPECT_EQ(load_checkpoint(run).step, 2);
  }
  const auto longer = run_cli({"train", config.string(), "--run-dir", run, "--resume", "--set", "train.steps=3",
                               "--set", "train.log_interval=2"});
  EXPECT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_NE(longer.output.find("resume: train.steps 2 -> 3"), std::string::npos) << longer.output;
  EXPECT_NE(longer.output.find("resume: train.log_interval 1 -> 2"), std::string::npos) << longer.output;
  EXPECT_EQ(load_checkpoint(run).step, 3);
  // A finished run has nothing to continue: said, not a silent "done" without a checkpoint.
  const auto finished = run_cli({"train", config.string(), "--run-dir", run, "--resume", "--set", "train.steps=3"});
  EXPECT_EQ(finished.exit_code, 2) << finished.output;
  EXPECT_NE(finished.output.find("already at step 3 of train.steps = 3"), std::string::npos) << finished.output;
  fs::remove_all(dir);
}

// --resume of a run that has written no checkpoint says so and how to start it, not which file it lacks.
TEST(ResumeChecks, ResumeBeforeAnyCheckpointSaysThereIsNoneYet) {
  const auto dir = testing::temp_dir("resume_nothing");
  const auto config = write_tiny_config(dir, 2);
  const auto run = dir / "run";
  for (const bool folder_exists : {false, true}) {
    if (folder_exists) fs::create_directories(run / "checkpoints");
    const auto result = run_cli({"train", config.string(), "--run-dir", run.string(), "--resume"});
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_NE(result.output.find("--resume: run folder '" + run.string() + "' has no complete checkpoint yet; start "
                                 "the run without --resume"),
              std::string::npos)
        << result.output;
  }
  fs::remove_all(dir);
}

// A config whose data folder has not been prepared yet says so, with the command that prepares it; a folder that
// is not a prepared one is named as such (not as a tokenizer that cannot be found).
TEST(ResumeChecks, AnUnpreparedDataFolderIsNamedWithTheCommandThatPreparesIt) {
  const auto dir = testing::temp_dir("unprepared_data");
  const auto config = write_tiny_config(dir, 2);
  const auto missing = (dir / "not-yet").string();
  const auto result = run_cli({"train", config.string(), "--run-dir", (dir / "run").string(), "--set",
                               "data.path=\"" + missing + "\""});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("data.path = '" + missing + "' does not exist: prepare it first with `inkstone data "
                               "prepare --out " + missing + "`"),
            std::string::npos)
      << result.output;
  fs::create_directories(dir / "empty");
  const auto empty = run_cli({"train", config.string(), "--run-dir", (dir / "run").string(), "--set",
                              "data.path=\"" + (dir / "empty").string() + "\""});
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_NE(empty.output.find("holds no tokenizer.json: it is not a folder made by `inkstone data prepare`"),
            std::string::npos)
      << empty.output;
  fs::remove_all(dir);
}

// eval --data checks a data folder's manifest against the checkpoint's tokenizer as train does: a manifest that
// names another tokenizer kind (or vocabulary size) is refused by the key, not read with the wrong ids.
TEST(ResumeChecks, EvalDataOfAnotherTokenizerKindIsRefusedAsTrainRefusesIt) {
  const auto dir = testing::temp_dir("eval_kind");
  const auto config = write_tiny_config(dir, 2);
  const auto run = dir / "run";
  ASSERT_EQ(run_cli({"train", config.string(), "--run-dir", run.string()}).exit_code, 0);
  const auto manifest_path = dir / "data" / "manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(manifest_path));
  manifest["tokenizer"]["kind"] = "bpe";
  std::ofstream(manifest_path) << manifest.dump();
  const auto result = run_cli({"eval", "--run-dir", run.string(), "--data", (dir / "data").string()});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("tokenizer.kind = 'bpe' but this run's tokenizer is 'byte'"), std::string::npos)
      << result.output;
  fs::remove_all(dir);
}

// A prompt longer than the trained context is refused by name, or cut from the front on request.
TEST(BoundedSampling, ALongPromptIsRefusedOrTruncatedOnRequest) {
  const auto dir = testing::temp_dir("bounded_sampling");
  const auto config = write_tiny_config(dir, 1);
  const auto run = (dir / "run").string();
  ASSERT_EQ(run_cli({"train", config.string(), "--run-dir", run}).exit_code, 0);
  const std::string prompt(40, 'a');  // 41 tokens with the leading eos; max_seq_len is 32
  const auto refused = run_cli({"sample", "--run-dir", run, "--prompt", prompt, "--max-new-tokens", "4"});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("prompt 0 has 41 tokens: with max_new_tokens = 4 that is 45 positions, more than "
                                "model.max_seq_len = 32"),
            std::string::npos)
      << refused.output;
  const auto cut = run_cli({"sample", "--run-dir", run, "--prompt", prompt, "--max-new-tokens", "4", "--num", "1",
                            "--truncate-prompts"});
  EXPECT_EQ(cut.exit_code, 0) << cut.output;
  EXPECT_NE(cut.output.find("prompt 0: 41 tokens truncated to its last 28"), std::string::npos) << cut.output;
  fs::remove_all(dir);
}

// The summed log-probability of each sample the CLI printed as JSON lines, in order.
std::vector<double> printed_log_probs(const std::string& output) {
  std::vector<double> sums;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') sums.push_back(nlohmann::json::parse(line).at("log_prob").get<double>());
  return sums;
}

// `sample --param-dtype bf16` samples with the checkpoint's weights rounded to bf16: the log-probabilities it prints
// are those of the same model cast in process, and not those of the fp32 weights.
TEST(SamplingPrecision, Bf16WeightsSampleAsTheModelCastToBf16) {
  const auto dir = testing::temp_dir("sampling_precision");
  const auto config = write_tiny_config(dir, 2);
  const auto run = (dir / "run").string();
  ASSERT_EQ(run_cli({"train", config.string(), "--run-dir", run}).exit_code, 0);
  const auto cli = run_cli({"sample", "--run-dir", run, "--prompt", "the", "--num", "3", "--max-new-tokens", "6",
                            "--temperature", "1", "--seed", "5", "--format", "jsonl", "--param-dtype", "bf16"});
  ASSERT_EQ(cli.exit_code, 0) << cli.output;
  EXPECT_NE(cli.output.find("sampling with bf16 weights"), std::string::npos) << cli.output;
  const auto printed = printed_log_probs(cli.output);
  ASSERT_EQ(printed.size(), 3u) << cli.output;

  const auto in_process = [&](bool bf16) {
    cli::TrainedModel trained = cli::load_trained_model(run, "cpu");
    if (bf16) cast_parameters(*trained.model, torch::kBFloat16);
    SampleConfig sample = trained.config.sample;
    sample.num = 3;
    sample.max_new_tokens = 6;
    sample.temperature = 1.0;
    sample.seed = 5;
    const PromptFormat format(trained.config.chat, *trained.tokenizer);
    std::vector<double> sums;
    for (const auto& s :
         sample_autoregressive(trained.model, {format.encode("the")}, ar_sample_options(sample, format)).samples)
      sums.push_back(std::accumulate(s.log_probs.begin(), s.log_probs.end(), 0.0));
    return sums;
  };
  const auto bf16 = in_process(true), fp32 = in_process(false);
  double largest_gap = 0;
  for (size_t i = 0; i < printed.size(); ++i) {
    EXPECT_NEAR(printed[i], bf16[i], 1e-5) << "sample " << i;
    largest_gap = std::max(largest_gap, std::abs(printed[i] - fp32[i]));
  }
  EXPECT_GT(largest_gap, 1e-4) << "the printed samples are the fp32 model's";
  fs::remove_all(dir);
}

int wait_for_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The metrics lines a run has logged so far.
int64_t logged_lines(const fs::path& run_dir) {
  std::ifstream metrics(run_dir / "metrics.jsonl");
  int64_t lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  return lines;
}

// Waits (at most two minutes) until the run has logged `lines` metrics lines; `between` runs while it waits.
void wait_for_lines(const fs::path& run_dir, int64_t lines, const std::function<void()>& between = [] {}) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (logged_lines(run_dir) < lines && std::chrono::steady_clock::now() < deadline) {
    between();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Starts `inkstone train` in the background, sends `signal` once the run has logged `after_steps` steps.
int train_and_signal(const fs::path& config, const fs::path& run_dir, int signal, int64_t after_steps) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string log = (run_dir.parent_path() / "train.log").string();
    if (!::freopen(log.c_str(), "w", stdout) || !::freopen(log.c_str(), "a", stderr)) ::_exit(126);
    ::execl(testing::cli_binary().c_str(), "inkstone", "train", config.c_str(), "--run-dir", run_dir.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  wait_for_lines(run_dir, after_steps);
  ::kill(pid, signal);
  return wait_for_exit(pid);
}

TEST(Preemption, SigtermCheckpointsTheCurrentStepAndResumeFinishesTheRun) {
  const auto dir = testing::temp_dir("preemption");
  const auto config = write_tiny_config(dir, 100000);
  const int code = train_and_signal(config, dir / "run", SIGTERM, 3);
  EXPECT_EQ(code, 128 + SIGTERM);
  const auto checkpoint = latest_checkpoint(dir / "run");
  ASSERT_TRUE(checkpoint.has_value());
  const int64_t stopped_at = load_checkpoint(checkpoint->string()).step;
  EXPECT_GE(stopped_at, 3);
  const auto resumed = run_cli({"train", config.string(), "--run-dir", (dir / "run").string(), "--resume", "--set",
                                "train.steps=" + std::to_string(stopped_at + 2)});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from step " + std::to_string(stopped_at)), std::string::npos)
      << resumed.output;
  fs::remove_all(dir);
}

TEST(Preemption, SigintSigusr1AndSighupStopTheSameWay) {
  for (const int signal : {SIGINT, SIGUSR1, SIGHUP}) {
    const auto dir = testing::temp_dir("preemption_" + std::to_string(signal));
    const auto config = write_tiny_config(dir, 100000);
    EXPECT_EQ(train_and_signal(config, dir / "run", signal, 2), 128 + signal);
    EXPECT_TRUE(latest_checkpoint(dir / "run").has_value()) << signal;
    fs::remove_all(dir);
  }
}

// Many diffusion samples run in batches, each printed as it finishes, with a progress line and its estimate on
// stderr; the samples are those of one big batch (each sequence draws from its own stream).
TEST(BoundedSampling, ManyDiffusionSamplesArePrintedBatchByBatchWithProgress) {
  const auto dir = testing::temp_dir("sampling_progress");
  const auto config = write_tiny_config(dir, 2);
  const auto trained = run_cli({"train", config.string(), "--run-dir", (dir / "run").string(), "--set",
                                "objective.name=\"uniform_diffusion\""});
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto sample = [&](const std::string& batch_size) {
    return run_cli({"sample", "--run-dir", (dir / "run").string(), "--num", "7", "--max-new-tokens", "6",
                    "--steps", "4", "--format", "jsonl", "--batch-size", batch_size});
  };
  const auto batched = sample("3"), whole = sample("64");
  ASSERT_EQ(batched.exit_code, 0) << batched.output;
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto sample_lines = [](const std::string& output) {
    std::vector<std::string> lines;
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line.front() == '{') lines.push_back(line);
    return lines;
  };
  EXPECT_EQ(sample_lines(batched.output).size(), 7u) << batched.output;
  EXPECT_EQ(sample_lines(batched.output), sample_lines(whole.output));
  EXPECT_NE(batched.output.find("sample 100% 7/7"), std::string::npos) << batched.output;
  EXPECT_EQ(whole.output.find("sample 100%"), std::string::npos) << whole.output;  // one batch: no progress line
  fs::remove_all(dir);
}

// A closed terminal or ssh session: stdout and stderr are a pipe whose reader is gone when SIGHUP arrives. The
// run's next lines would raise SIGPIPE and end it without a checkpoint; it must write one and exit with 129.
TEST(Preemption, AHangUpWhoseTerminalIsGoneStillWritesTheCheckpoint) {
  const auto dir = testing::temp_dir("preemption_hangup");
  const auto config = write_tiny_config(dir, 100000);
  const auto run_dir = dir / "run";
  int output[2];
  ASSERT_EQ(::pipe(output), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(output[0]);
    ::dup2(output[1], STDOUT_FILENO);
    ::dup2(output[1], STDERR_FILENO);
    ::execl(testing::cli_binary().c_str(), "inkstone", "train", config.c_str(), "--run-dir", run_dir.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(output[1]);
  // Drain the pipe until two steps are logged, as the terminal would, then hang up: reader gone, then the signal.
  ::fcntl(output[0], F_SETFL, O_NONBLOCK);
  char buffer[4096];
  wait_for_lines(run_dir, 2, [&] {
    while (::read(output[0], buffer, sizeof buffer) > 0) {
    }
  });
  ::close(output[0]);
  ::kill(pid, SIGHUP);
  ::kill(pid, SIGHUP);  // a lost session often hangs up twice: the second must not end the run before its checkpoint
  EXPECT_EQ(wait_for_exit(pid), 128 + SIGHUP);
  EXPECT_TRUE(latest_checkpoint(run_dir).has_value());
  fs::remove_all(dir);
}

// Under nohup (SIGHUP ignored when the run starts) a hang-up is the user's wish to keep running: the run goes on
// and a later SIGTERM still stops it with a checkpoint.
TEST(Preemption, AHangUpIsIgnoredUnderNohup) {
  const auto dir = testing::temp_dir("preemption_nohup");
  const auto config = write_tiny_config(dir, 100000);
  const auto run_dir = dir / "run";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGHUP, SIG_IGN);  // what nohup does before it runs the command
    const std::string log = (dir / "train.log").string();
    if (!::freopen(log.c_str(), "w", stdout) || !::freopen(log.c_str(), "a", stderr)) ::_exit(126);
    ::execl(testing::cli_binary().c_str(), "inkstone", "train", config.c_str(), "--run-dir", run_dir.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  wait_for_lines(run_dir, 2);
  ::kill(pid, SIGHUP);
  const int64_t at_hangup = logged_lines(run_dir);
  wait_for_lines(run_dir, at_hangup + 3);
  EXPECT_GE(logged_lines(run_dir), at_hangup + 3) << "the run stopped at the hang-up";
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_for_exit(pid), 128 + SIGTERM);
  EXPECT_TRUE(latest_checkpoint(run_dir).has_value());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace inkstone
