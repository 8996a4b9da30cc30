// The AR objective trained by the training session with the token-window source: loss definition, gradient
// accumulation, exact resume, an objective's own weights, NaN guard.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "checkpoint/checkpoint.h"
#include "dataset/byte_tokenizer.h"
#include "dataset/data_prepare.h"
#include "objectives/objective.h"
#include "tests/fixtures.h"
#include "tests/test_paths.h"
#include "train/session.h"
#include "train/window_source.h"

namespace inkstone {
namespace {

std::filesystem::path prepare_corpus(const std::string& name) {
  auto dir = testing::temp_dir(name);
  testing::prepare_word_corpus(dir);
  return dir;
}

Config tiny_config(const std::filesystem::path& data_dir) {
  return config_from_string(
      "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\nmax_seq_len = 32\n"
      "[data]\nseq_len = 16\n"
      "[optim]\nlearning_rate = 3e-3\n"
      "[schedule]\nwarmup_steps = 2\n"
      "[train]\nsteps = 8\nbatch_size = 4\nlog_interval = 1\neval_interval = 0\neval_batches = 2\n"
      "checkpoint_interval = 4\nkeep_checkpoints = 5\n",
      "test.toml", {"data.path=\"" + (data_dir / "data").string() + "\""});
}

struct TinyRun {
  Config config;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const WindowLoader> train, val;
};

TinyRun make_setup(const Config& config) {
  TinyRun s{config, std::make_shared<ByteTokenizer>(), nullptr, nullptr};
  WindowLoaderOptions o;
  o.window_len = config.data.seq_len + 1;
  o.seed = static_cast<uint64_t>(config.run.seed);
  o.split = "train";
  s.train = std::make_shared<WindowLoader>(config.data.path, o);
  o.split = "val";
  s.val = std::make_shared<WindowLoader>(config.data.path, o);
  return s;
}

// Trains from scratch (or resumes from `checkpoint`) and returns the loss of every step by step number.
std::map<int64_t, double> train_run(const TinyRun& s, const std::filesystem::path& run_dir,
                                    const CheckpointData* checkpoint = nullptr,
                                    std::unique_ptr<Objective> objective = nullptr) {
  torch::manual_seed(static_cast<uint64_t>(s.config.run.seed));
  auto model = build_language_model(s.config.model, s.tokenizer->vocab_size());
  TrainingSession session(s.config, model,
                          objective ? std::move(objective) : make_objective(s.config, *s.tokenizer), s.tokenizer,
                          run_dir, torch::kCPU);
  WindowSource source(session, s.train, s.val);
  if (checkpoint) session.resume(*checkpoint, source);
  std::map<int64_t, double> losses;
  source.on_step = [&](int64_t step, double loss) { losses[step] = loss; };
  session.run(source);
  return losses;
}

class ArTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { corpus_ = new std::filesystem::path(prepare_corpus("ar_training")); }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*corpus_);
    delete corpus_;
  }
  static std::filesystem::path* corpus_;
};
std::filesystem::path* ArTraining::corpus_ = nullptr;

TEST_F(ArTraining, LossIsMeanNextTokenNllOverRealTargets) {
  Config config = tiny_config(*corpus_);
  auto objective = make_objective(config, ByteTokenizer());
  torch::manual_seed(1);
  auto model = build_language_model(config.model, 260);
  auto tokens = torch::randint(0, 256, {2, 9}, torch::kLong);
  auto real = torch::ones({2, 9}, torch::kBool);
  real[1][7] = false;  // padding at the end of row 1
  real[1][8] = false;
  LossOutput out = objective->loss(*model, {tokens, real});

  // Oracle in float64: -log softmax(logits)[next token], over targets whose input and target are both real.
  auto logits = model->forward(tokens.slice(1, 0, 8)).to(torch::kDouble);
  auto log_probs = torch::log_softmax(logits, -1);
  double sum = 0;
  int count = 0;
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 8; ++t) {
      if (!real[b][t].item<bool>() || !real[b][t + 1].item<bool>()) continue;
      sum -= log_probs[b][t][tokens[b][t + 1].item<int64_t>()].item<double>();
      ++count;
    }
  EXPECT_EQ(out.count.item<double>(), count);
  EXPECT_EQ(count, 14);  // row 1 loses the two targets that touch its padding
  EXPECT_NEAR(out.loss_sum.item<double>(), sum, 1e-4);
}

// data.document_mask reaches the model: with the learning rate at 0 the weights stay at init, so the trainer's
// validation must equal the objective's evaluation over windows carrying their packed documents (the validation
// split holds several eos-separated documents), and differ from the unmasked one.
TEST_F(ArTraining, DocumentMaskReachesTheModel) {
  Config config = tiny_config(*corpus_);
  config.data.document_mask = true;
  config.optim.learning_rate = 0;
  config.train.steps = 1;
  config.train.eval_batches = 0;
  TinyRun s = make_setup(config);
  torch::manual_seed(static_cast<uint64_t>(config.run.seed));
  auto model = build_language_model(config.model, s.tokenizer->vocab_size());
  auto objective = make_objective(config, *s.tokenizer);
  // An AR model's eos opens the document after it (core/batch.h, DocumentSplit).
  const DocumentSplit documents{s.tokenizer->specials().eos, /*eos_opens=*/true};
  const auto loss_nats = [&](const WindowEvalSource& source) {
    const ValidationSums totals = objective->evaluate(*model, source);
    return totals.sums.at("loss_nats") / totals.units;
  };
  const double masked = loss_nats(WindowEvalSource(*s.val, 4, 0, torch::kCPU, documents));
  const double unmasked = loss_nats(WindowEvalSource(*s.val, 4, 0, torch::kCPU));

  TrainingSession session(config, model, make_objective(config, *s.tokenizer), s.tokenizer,
                          testing::temp_dir("ar_document_mask"), torch::kCPU);
  WindowSource source(session, s.train, s.val);
  const TrainResult result = session.run(source);
  EXPECT_NEAR(result.final_eval.at("loss_nats"), masked, 1e-9);
  EXPECT_GT(std::abs(masked - unmasked), 1e-4);
}

TEST_F(ArTraining, TwoHalfMicroBatchesEqualOneFullBatch) {
  Config config = tiny_config(*corpus_);
  TinyRun s = make_setup(config);
  auto objective = make_objective(config, ByteTokenizer());
  torch::manual_seed(3);
  auto model = build_language_model(config.model, s.tokenizer->vocab_size());
  NamedTensors params;
  for (auto& p : model->named_parameters()) params.emplace_back(p.key(), p.value());
  TokenBatch batch = s.train->train_batch(0, 4);

  auto grads = [&](std::vector<Batch> micro) {
    model->zero_grad();
    accumulate_gradients(*objective, *model, micro, params, false);
    std::vector<torch::Tensor> out;
    for (auto& [name, p] : params) out.push_back(p.grad().clone());
    return out;
  };
  auto full = grads({token_batch_to_device(batch, 0, 4, torch::kCPU)});
  auto halves =
      grads({token_batch_to_device(batch, 0, 2, torch::kCPU), token_batch_to_device(batch, 2, 4, torch::kCPU)});
  for (size_t i = 0; i < full.size(); ++i) {
    SCOPED_TRACE(params[i].first);
    EXPECT_LE((full[i] - halves[i]).abs().max().item<double>(), 1e-6);
    EXPECT_GT(full[i].abs().max().item<double>(), 0.0);
  }
}

TEST_F(ArTraining, ResumeContinuesBitExactly) {
  Config config = tiny_config(*corpus_);
  TinyRun s = make_setup(config);
  auto straight_dir = *corpus_ / "straight";
  auto straight = train_run(s, straight_dir);
  ASSERT_EQ(straight.size(), 8u);

  // Continue from the step-4 checkpoint in a fresh trainer and process (state comes only from the checkpoint).
  CheckpointData at4 = load_checkpoint(straight_dir / "checkpoints" / "step_000004");
  ASSERT_EQ(at4.step, 4);
  torch::manual_seed(999);  // a different global RNG state must not matter: the checkpoint restores it
  auto resumed = train_run(s, *corpus_ / "resumed", &at4);
  ASSERT_EQ(resumed.size(), 4u);
  for (int64_t step = 5; step <= 8; ++step) EXPECT_EQ(resumed.at(step), straight.at(step)) << "step " << step;
  EXPECT_LT(straight.at(8), straight.at(1));
}

// run.param_dtype = bf16: the model trains in bf16 (its weights and checkpointed model are bf16) while AdamW steps
// fp32 master weights, which the checkpoint's optimizer state keeps and the model is the rounding of, exactly.
// The losses follow the fp32 run's to bf16 accuracy, and a resumed run continues bitwise.
TEST_F(ArTraining, Bf16WeightsTrainOnFp32MasterCopiesAndResumeBitExactly) {
  Config fp32 = tiny_config(*corpus_);
  const auto reference = train_run(make_setup(fp32), *corpus_ / "bf16_reference");
  Config config = fp32;
  config.run.param_dtype = FloatFormat::bf16;
  TinyRun s = make_setup(config);
  const auto dir = *corpus_ / "bf16_straight";
  const auto straight = train_run(s, dir);
  ASSERT_EQ(straight.size(), reference.size());
  for (const auto& [step, loss] : reference) EXPECT_NEAR(straight.at(step), loss, 0.02 * loss) << "step " << step;
  EXPECT_LT(straight.at(8), straight.at(1));

  const CheckpointData last = load_checkpoint(dir);
  std::map<std::string, torch::Tensor> state(last.optimizer.begin(), last.optimizer.end());
  ASSERT_FALSE(last.model.empty());
  for (const auto& [name, weight] : last.model) {
    SCOPED_TRACE(name);
    ASSERT_EQ(weight.scalar_type(), torch::kBFloat16);
    ASSERT_TRUE(state.count(name + ".master"));
    const torch::Tensor& master = state.at(name + ".master");
    EXPECT_EQ(master.scalar_type(), torch::kFloat);
    EXPECT_EQ(state.at(name + ".exp_avg").scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(master.to(torch::kBFloat16), weight));
    if (name.find("norm") == std::string::npos)  // norm gains may stay exactly representable
      EXPECT_FALSE(torch::equal(master, weight.to(torch::kFloat)));
  }

  CheckpointData at4 = load_checkpoint(dir / "checkpoints" / "step_000004");
  torch::manual_seed(999);
  const auto resumed = train_run(s, *corpus_ / "bf16_resumed", &at4);
  ASSERT_EQ(resumed.size(), 4u);
  for (int64_t step = 5; step <= 8; ++step) EXPECT_EQ(resumed.at(step), straight.at(step)) << "step " << step;
  const CheckpointData resumed_last = load_checkpoint(*corpus_ / "bf16_resumed");
  for (size_t k = 0; k < last.model.size(); ++k)
    EXPECT_TRUE(torch::equal(resumed_last.model[k].second, last.model[k].second)) << last.model[k].first;

  // The fp32 run's checkpoint has no master weights: resuming it with bf16 weights is refused by the config check.
  CheckpointData fp32_at4 = load_checkpoint(*corpus_ / "bf16_reference" / "checkpoints" / "step_000004");
  const std::string refusal = testing::input_error_of([&] { train_run(s, *corpus_ / "bf16_refused", &fp32_at4); });
  EXPECT_NE(refusal.find("run.param_dtype"), std::string::npos) << refusal;
}

// The AR loss scaled by a weight of the objective's own, exp(log_scale): what FlowRL's log Z head is for RL, here in
// pretraining. The session must optimise it, checkpoint it and restore it.
class ScaledArObjective : public Objective {
 public:
  explicit ScaledArObjective(const Config& config)
      : inner_(make_objective(config, ByteTokenizer())), own_(std::make_shared<torch::nn::Module>()) {
    log_scale_ = own_->register_parameter("log_scale", torch::zeros({}));
  }
  std::string name() const override { return inner_->name(); }
  ObjectiveNeeds needs() const override { return inner_->needs(); }
  LossOutput loss(LanguageModelImpl& model, const Batch& batch) override {
    LossOutput out = inner_->loss(model, batch);
    out.loss_sum = out.loss_sum * log_scale_.exp();
    return out;
  }
  ValidationSums evaluate(LanguageModelImpl& model, const EvalSource& source) override {
    return inner_->evaluate(model, source);
  }
  std::shared_ptr<torch::nn::Module> trainable() override { return own_; }

 private:
  std::unique_ptr<Objective> inner_;
  std::shared_ptr<torch::nn::Module> own_;
  torch::Tensor log_scale_;
};

TEST_F(ArTraining, AnObjectivesOwnWeightsAreTrainedCheckpointedAndResumed) {
  Config config = tiny_config(*corpus_);
  TinyRun s = make_setup(config);
  const auto straight_dir = *corpus_ / "own_weights_straight";
  const auto straight = train_run(s, straight_dir, nullptr, std::make_unique<ScaledArObjective>(config));
  const CheckpointData end = load_checkpoint(straight_dir / "checkpoints" / "step_000008");
  ASSERT_EQ(end.objective.size(), 1u);
  EXPECT_EQ(end.objective[0].first, "log_scale");
  // d(loss)/d(log_scale) is the (positive) loss itself, so AdamW lowers it by about the learning rate per step.
  EXPECT_LT(end.objective[0].second.item<double>(), -0.01);

  const CheckpointData at4 = load_checkpoint(straight_dir / "checkpoints" / "step_000004");
  const auto resumed_dir = *corpus_ / "own_weights_resumed";
  const auto resumed = train_run(s, resumed_dir, &at4, std::make_unique<ScaledArObjective>(config));
  for (int64_t step = 5; step <= 8; ++step) EXPECT_EQ(resumed.at(step), straight.at(step)) << "step " << step;
  const CheckpointData resumed_end = load_checkpoint(resumed_dir / "checkpoints" / "step_000008");
  ASSERT_EQ(resumed_end.objective.size(), 1u);
  EXPECT_TRUE(torch::equal(resumed_end.objective[0].second, end.objective[0].second));
}

// Wraps the AR objective and multiplies the loss on chosen calls (by NaN unless told otherwise).
class PoisonedObjective : public Objective {
 public:
  PoisonedObjective(std::unique_ptr<Objective> inner, std::set<int> poisoned, double factor = std::nan(""))
      : inner_(std::move(inner)), poisoned_(std::move(poisoned)), factor_(factor) {}
  std::string name() const override { return inner_->name(); }
  ObjectiveNeeds needs() const override { return inner_->needs(); }
  LossOutput loss(LanguageModelImpl& model, const Batch& batch) override {
    LossOutput out = inner_->loss(model, batch);
    if (poisoned_.count(++calls_)) out.loss_sum = out.loss_sum * factor_;
    return out;
  }
  ValidationSums evaluate(LanguageModelImpl& model, const EvalSource& source) override {
    return inner_->evaluate(model, source);
  }

 private:
  std::unique_ptr<Objective> inner_;
  std::set<int> poisoned_;
  double factor_;
  int calls_ = 0;
};

TEST_F(ArTraining, NonFiniteStepsAreSkippedAndTooManyStopTheRun) {
  Config config = tiny_config(*corpus_);
  config.train.max_bad_steps = 2;
  TinyRun s = make_setup(config);
  auto poisoned = std::make_unique<PoisonedObjective>(make_objective(config, ByteTokenizer()), std::set<int>{3, 6});
  auto losses = train_run(s, *corpus_ / "nan_skip", nullptr, std::move(poisoned));
  EXPECT_EQ(losses.size(), 6u);  // steps 3 and 6 skipped
  EXPECT_EQ(losses.count(3), 0u);
  EXPECT_EQ(losses.count(6), 0u);

  std::string message;
  try {
    train_run(s, *corpus_ / "nan_stop", nullptr,
              std::make_unique<PoisonedObjective>(make_objective(config, ByteTokenizer()), std::set<int>{2, 3}));
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("2 consecutive steps had a non-finite loss"), std::string::npos) << message;
}

// Where AdamW runs its fused kernel the step-or-skip decision is taken on the device and the figures are read one
// update late. The run is the one the host's decision makes, skips included: the same losses, weights, moments and
// step counts, and the same events logged. A spike guard that can never fire (its limit is beyond any z-score of
// a 6-update window) makes the host decide.
TEST_F(ArTraining, DecidingOnTheDeviceTrainsAsDecidingOnTheHost) {
  Config config = tiny_config(*corpus_);
  config.train.log_interval = 3;
  TinyRun s = make_setup(config);
  Config host_config = config;
  host_config.train.spike_window = 6;
  host_config.train.spike_loss_z = 1e30;
  TinyRun host_setup = make_setup(host_config);
  const auto poisoned = [&] {
    return std::make_unique<PoisonedObjective>(make_objective(config, ByteTokenizer()), std::set<int>{3, 5});
  };
  {
    auto model = build_language_model(config.model, 256);
    TrainingSession device_session(config, model, make_objective(config, ByteTokenizer()),
                                   std::make_shared<ByteTokenizer>(), *corpus_ / "unused", torch::kCPU);
    TrainingSession host_session(host_config, model, make_objective(config, ByteTokenizer()),
                                 std::make_shared<ByteTokenizer>(), *corpus_ / "unused", torch::kCPU);
    if (!device_session.decides_on_device()) GTEST_SKIP() << "this libtorch has no fused AdamW for the CPU";
    ASSERT_FALSE(host_session.decides_on_device());
  }
  const auto on_device = train_run(s, *corpus_ / "decided_on_device", nullptr, poisoned());
  const auto on_host = train_run(host_setup, *corpus_ / "decided_on_host", nullptr, poisoned());
  EXPECT_EQ(on_device.size(), 6u);
  EXPECT_EQ(on_device, on_host);

  const auto events = [&](const std::string& run) {
    std::vector<nlohmann::json> lines;
    std::ifstream in(*corpus_ / run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto record = nlohmann::json::parse(line);
      if (record.value("split", "") != "train") continue;
      record.erase("elapsed_s");
      record.erase("tokens_per_s");
      record.erase("tflops_per_s");
      record.erase("peak_rss_mib");
      record.erase("cpu_max_allocated_mib");
      lines.push_back(record);
    }
    return lines;
  };
  EXPECT_EQ(events("decided_on_device"), events("decided_on_host"));
  for (const char* step : {"step_000004", "step_000008"}) {
    const auto device = load_checkpoint(*corpus_ / "decided_on_device" / "checkpoints" / step);
    const auto host = load_checkpoint(*corpus_ / "decided_on_host" / "checkpoints" / step);
    ASSERT_EQ(device.model.size(), host.model.size());
    for (size_t k = 0; k < device.model.size(); ++k)
      EXPECT_TRUE(torch::equal(device.model[k].second, host.model[k].second)) << step << " " << device.model[k].first;
    ASSERT_EQ(device.optimizer.size(), host.optimizer.size());
    for (size_t k = 0; k < device.optimizer.size(); ++k)
      EXPECT_TRUE(torch::equal(device.optimizer[k].second, host.optimizer[k].second))
          << step << " " << device.optimizer[k].first;
    EXPECT_EQ(device.state.at("optimizer"), host.state.at("optimizer")) << step;
  }
}

// A planted loss spike (x50 at step 9) is a z-score outlier of the 6 updates before it: the update is skipped and
// logged, the weights and AdamW state stay as step 8 left them. A run resumed from step 4 restores the guard's
// window and skips step 9 too (without the window it would not be full yet, and would step).
TEST_F(ArTraining, ALossSpikeIsSkippedLoggedAndJudgedAlikeAfterResume) {
  Config config = tiny_config(*corpus_);
  config.train.steps = 12;
  config.train.checkpoint_interval = 1;
  config.train.keep_checkpoints = 20;
  config.train.spike_window = 6;
  config.train.spike_loss_z = 3;
  TinyRun s = make_setup(config);
  const auto dir = *corpus_ / "spike";
  const auto spiking = [&](int call) {
    return std::make_unique<PoisonedObjective>(make_objective(config, ByteTokenizer()), std::set<int>{call}, 50.0);
  };
  const auto straight = train_run(s, dir, nullptr, spiking(9));
  EXPECT_EQ(straight.size(), 11u);
  EXPECT_EQ(straight.count(9), 0u);

  int spikes = 0;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.value("event", "") != "skipped_spike") continue;
    ++spikes;
    EXPECT_EQ(record["step"], 9);
    EXPECT_GT(record["loss_z"].get<double>(), 3.0);
  }
  EXPECT_EQ(spikes, 1);
  const CheckpointData at8 = load_checkpoint(dir / "checkpoints" / "step_000008");
  const CheckpointData at9 = load_checkpoint(dir / "checkpoints" / "step_000009");
  for (size_t k = 0; k < at8.model.size(); ++k)
    EXPECT_TRUE(torch::equal(at8.model[k].second, at9.model[k].second)) << at8.model[k].first;
  for (size_t k = 0; k < at8.optimizer.size(); ++k)
    EXPECT_TRUE(torch::equal(at8.optimizer[k].second, at9.optimizer[k].second)) << at8.optimizer[k].first;

  const CheckpointData at4 = load_checkpoint(dir / "checkpoints" / "step_000004");
  const auto resumed = train_run(s, *corpus_ / "spike_resumed", &at4, spiking(5));  // call 5 is step 9
  ASSERT_EQ(resumed.size(), 7u);
  for (const auto& [step, loss] : resumed) EXPECT_EQ(loss, straight.at(step)) << "step " << step;
}

TEST_F(ArTraining, MetricsLogHasTheDocumentedFields) {
  Config config = tiny_config(*corpus_);
  TinyRun s = make_setup(config);
  auto run_dir = *corpus_ / "metrics";
  train_run(s, run_dir);
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  int train_lines = 0, val_lines = 0;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line);
    if (record["split"] == "train") {
      ++train_lines;
      for (const char* key : {"step", "tokens_seen", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s",
                              "accuracy"})
        EXPECT_TRUE(record.contains(key)) << key;
    } else {
      ++val_lines;
      for (const char* key : {"loss_nats", "bits_per_byte", "perplexity"}) EXPECT_TRUE(record.contains(key)) << key;
    }
  }
  EXPECT_EQ(train_lines, 8);
  EXPECT_EQ(val_lines, 1);
}

}  // namespace
}  // namespace inkstone
