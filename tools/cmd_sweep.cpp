// `inkstone sweep SWEEP.toml [--jobs N] [--dry-run] [--report-only]`: every (variant, seed) of a sweep trained
// as its own `inkstone train` process, resumably, then the noise-floor report (docs/sweeps.md).
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "checkpoint/checkpoint.h"
#include "core/atomic_file.h"
#include "core/errors.h"
#include "dataset/tokenizer.h"
#include "models/language_model.h"
#include "sweep/sweep_report.h"
#include "tools/commands.h"
#include "viz/interval_chart.h"

namespace inkstone::cli {
namespace {

struct SweepOptions {
  std::string file;
  int jobs = 1;
  bool dry_run = false;
  bool report_only = false;
};

double training_flops_per_token(const Config& config) {
  const auto tokenizer =
      load_tokenizer(!config.data.tokenizer.empty() ? config.data.tokenizer : data_folders(config.data).front().path);
  const LanguageModel model = build_language_model(config.model, tokenizer->vocab_size());
  return 3 * model->forward_flops_per_token(config.data.seq_len);
}

// The step of a run's newest checkpoint (0: none).
int64_t checkpointed_step(const SweepRun& run) {
  const auto latest = latest_checkpoint(run.run_dir);
  if (!latest) return 0;
  return std::stoll(latest->filename().string().substr(std::strlen("step_")));
}

[[noreturn]] void exec_training(const std::filesystem::path& self, const SweepSpec& spec, const SweepRun& run,
                                bool resume) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a killed sweep takes its runs with it; they resume from checkpoints
  const int log = ::open((run.run_dir / "train.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (log >= 0) {
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
  }
  std::vector<std::string> args = {self.string(), "train", spec.base_config.string(), "--run-dir",
                                   run.run_dir.string()};
  for (const auto& o : run.overrides) {
    args.push_back("--set");
    args.push_back(o);
  }
  if (resume) args.push_back("--resume");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(self.c_str(), argv.data());
  ::_exit(127);
}

// Trains the runs not finished yet, at most `jobs` at once; a partly trained run continues from its checkpoint.
// Returns the runs that failed.
std::vector<const SweepRun*> train_missing(const SweepSpec& spec, const std::vector<SweepRun>& runs, int jobs) {
  const auto self = std::filesystem::read_symlink("/proc/self/exe");
  std::vector<const SweepRun*> pending, failed;
  for (const SweepRun* run : training_order(runs)) {
    const int64_t step = checkpointed_step(*run);
    if (step == run->steps) {
      fmt::print("sweep: {}/seed-{} finished (step {}), kept\n", run->variant, run->seed_index, step);
      continue;
    }
    pending.push_back(run);
  }
  std::map<pid_t, const SweepRun*> running;
  size_t next = 0;
  while (next < pending.size() || !running.empty()) {
    while (next < pending.size() && static_cast<int>(running.size()) < jobs) {
      const SweepRun& run = *pending[next++];
      std::filesystem::create_directories(run.run_dir);
      const int64_t step = checkpointed_step(run);
      fmt::print("sweep: {}/seed-{}: training {} steps{} (log {})\n", run.variant, run.seed_index, run.steps,
                 step > 0 ? fmt::format(", resuming at step {}", step) : "", (run.run_dir / "train.log").string());
      std::fflush(stdout);
      const pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error("sweep: cannot start a training process");
      if (pid == 0) exec_training(self, spec, run, step > 0);
      running[pid] = &run;
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) break;
    const auto found = running.find(pid);
    if (found == running.end()) continue;
    const SweepRun& run = *found->second;
    running.erase(found);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    fmt::print("sweep: {}/seed-{} {}\n", run.variant, run.seed_index, ok ? "done" : "FAILED");
    if (!ok) failed.push_back(&run);
  }
  return failed;
}

void print_plan(const SweepSpec& spec, const std::vector<SweepRun>& runs) {
  fmt::print("sweep {}: {} variants x {} seeds, baseline {}, out {}\n", spec.file.string(), spec.variants.size(),
             spec.seeds.size(), spec.baseline, spec.out_dir.string());
  if (!spec.common.empty()) fmt::print("  every run: {}\n", fmt::join(spec.common, " "));
  for (size_t i = 0; i < runs.size(); i += spec.seeds.size())
    fmt::print("  {:<20} {:>8} steps  {}\n", runs[i].variant, runs[i].steps,
               fmt::join(spec.variants[i / spec.seeds.size()].overrides, " "));
}

// Per metric, per variant: the seeds' values, the mean with its 95% interval, marked when Holm's p < alpha.
std::vector<IntervalPanel> interval_panels(const SweepSpec& spec, const std::vector<MetricReport>& reports) {
  std::vector<IntervalPanel> panels;
  for (const auto& report : reports) {
    IntervalPanel panel{fmt::format("{} over {} seeds (dashed: baseline mean; *: beyond the noise floor)",
                                    report.metric, spec.seeds.size()),
                        {}};
    for (const auto& v : report.variants)
      panel.rows.push_back({v.variant, v.values, v.summary.mean, v.summary.ci_low, v.summary.ci_high,
                            !v.versus_baseline, v.versus_baseline && v.p_holm < spec.alpha});
    panels.push_back(std::move(panel));
  }
  return panels;
}

int sweep(const SweepOptions& o) {
  const SweepSpec spec = load_sweep(o.file);
  const std::vector<SweepRun> runs = plan_sweep(spec, training_flops_per_token);
  print_plan(spec, runs);
  if (o.dry_run) return 0;
  if (!o.report_only) {
    const auto failed = train_missing(spec, runs, o.jobs);
    if (!failed.empty()) {
      for (const SweepRun* run : failed)
        fmt::print(stderr, "sweep: {}/seed-{} failed; see {}\n", run->variant, run->seed_index,
                   (run->run_dir / "train.log").string());
      return 1;
    }
  }
  const auto reports = sweep_report(spec, runs);
  const std::string markdown = report_markdown(spec, reports);
  write_file_atomic(spec.out_dir / "report.md", markdown);
  write_file_atomic(spec.out_dir / "report.json", report_json(spec, reports).dump(2) + "\n");
  draw_interval_charts(interval_panels(spec, reports), spec.out_dir / "report.png");
  fmt::print("\n{}report: {}, report.json, report.png\n", markdown, (spec.out_dir / "report.md").string());
  return 0;
}

}  // namespace

void add_sweep_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<SweepOptions>();
  auto* cmd = app.add_subcommand("sweep", "Train every (variant, seed) of a sweep and report against the noise floor");
  cmd->add_option("sweep", o->file, "Sweep file (TOML: [sweep] and [[variant]])")->required()->check(CLI::ExistingFile);
  cmd->add_option("--jobs", o->jobs, "Training processes at once")->check(CLI::Range(1, 256));
  cmd->add_flag("--dry-run", o->dry_run, "Print the runs and their step budgets, train nothing");
  cmd->add_flag("--report-only", o->report_only, "Report from the finished runs, train nothing");
  cmd->callback([o, &action] { action = [o] { return sweep(*o); }; });
}

}  // namespace inkstone::cli
