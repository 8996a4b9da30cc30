// Checkpoints: round trip, crash safety, pruning and validation; optimizer and RNG state restore so that a
// resumed run is bitwise identical to one that never stopped.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/optimizer_state.h"
#include "checkpoint/rng_state.h"
#include "core/errors.h"
#include "core/torch_compat.h"
#include "tests/fixtures.h"
#include "tests/test_paths.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;

CheckpointData sample_checkpoint(int64_t step) {
  CheckpointData data;
  data.step = step;
  data.state = {{"tokens_seen", step * 1000}, {"data", {{"shard", 2}, {"offset", 77}}}, {"rng", capture_rng_state()}};
  data.model = {{"embed.weight", torch::randn({8, 4})}, {"norm.weight", torch::ones({4}, torch::kBFloat16)}};
  data.optimizer = {{"embed.weight.exp_avg", torch::randn({8, 4})},
                    {"embed.weight.step", torch::tensor(step, torch::kInt64)}};
  data.config_toml = "[run]\nname = \"t\"\n";
  data.tokenizer = {{"model", {{"type", "BPE"}}}, {"step", step}};
  return data;
}

void expect_same_tensors(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  std::map<std::string, torch::Tensor> by_name(b.begin(), b.end());
  for (const auto& [name, tensor] : a) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, by_name[name])) << name;
  }
}

std::vector<std::string> folder_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string load_error(const fs::path& path) {
  try {
    load_checkpoint(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Checkpoint, RoundTripsEveryPiece) {
  const fs::path run = testing::temp_dir("ckpt_roundtrip");
  const CheckpointData saved = sample_checkpoint(7);
  const fs::path folder = save_checkpoint(run, saved, 3);
  EXPECT_EQ(folder, run / "checkpoints" / "step_000007");
  EXPECT_EQ(folder_names(run / "checkpoints"), std::vector<std::string>{"step_000007"});

  for (const fs::path& where : {run, folder}) {
    const CheckpointData loaded = load_checkpoint(where);
    EXPECT_EQ(loaded.step, 7);
    EXPECT_EQ(loaded.state, saved.state);
    EXPECT_EQ(loaded.config_toml, saved.config_toml);
    EXPECT_EQ(loaded.tokenizer, saved.tokenizer);
    expect_same_tensors(loaded.model, saved.model);
    expect_same_tensors(loaded.optimizer, saved.optimizer);
  }
}

TEST(Checkpoint, SavingTheSameStepAgainReplacesIt) {
  const fs::path run = testing::temp_dir("ckpt_replace");
  save_checkpoint(run, sample_checkpoint(3), 0);
  CheckpointData again = sample_checkpoint(3);
  again.config_toml = "changed";
  save_checkpoint(run, again, 0);
  EXPECT_EQ(load_checkpoint(run).config_toml, "changed");
  EXPECT_EQ(folder_names(run / "checkpoints"), std::vector<std::string>{"step_000003"});
}

// A real crash: a child process dies without unwinding right after the first file, as under kill -9.
TEST(Checkpoint, CrashAfterFirstFileLeavesPreviousCheckpointLoadable) {
  const fs::path run = testing::temp_dir("ckpt_crash");
  save_checkpoint(run, sample_checkpoint(1), 5);
  const CheckpointData next = sample_checkpoint(2);
  const pid_t writer = ::fork();
  if (writer == 0) {
    try {
      save_checkpoint(run, next, 5, [](const std::string&) { std::_Exit(3); });
    } catch (...) {
    }
    std::_Exit(4);
  }
  int status = 0;
  ::waitpid(writer, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;

  const std::string temp_name = ".step_000002.tmp-" + std::to_string(writer);
  EXPECT_EQ(folder_names(run / "checkpoints"), (std::vector<std::string>{temp_name, "step_000001"}));
  EXPECT_TRUE(fs::exists(run / "checkpoints" / temp_name / "model.safetensors"));
  EXPECT_FALSE(fs::exists(run / "checkpoints" / temp_name / "optimizer.safetensors"));

  // The dead writer's temporary folder is ignored and cleaned up; the previous checkpoint loads.
  EXPECT_EQ(latest_checkpoint(run), run / "checkpoints" / "step_000001");
  EXPECT_EQ(folder_names(run / "checkpoints"), std::vector<std::string>{"step_000001"});
  EXPECT_EQ(load_checkpoint(run).step, 1);
}

TEST(Checkpoint, FailureMidWriteRemovesTheTemporaryFolder) {
  const fs::path run = testing::temp_dir("ckpt_throw");
  save_checkpoint(run, sample_checkpoint(1), 5);
  std::vector<std::string> written;
  auto fail_after_first = [&](const std::string& file) {
    written.push_back(file);
    throw std::runtime_error("disk full");
  };
  EXPECT_THROW(save_checkpoint(run, sample_checkpoint(2), 5, fail_after_first), std::runtime_error);
  EXPECT_EQ(written, std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(folder_names(run / "checkpoints"), std::vector<std::string>{"step_000001"});
  EXPECT_EQ(load_checkpoint(run).step, 1);
}

TEST(Checkpoint, KeepsTheLastN) {
  const fs::path run = testing::temp_dir("ckpt_keep");
  for (int64_t step : {10, 20, 30, 40, 50}) save_checkpoint(run, sample_checkpoint(step), 2);
  EXPECT_EQ(folder_names(run / "checkpoints"), (std::vector<std::string>{"step_000040", "step_000050"}));
  // After resuming from an earlier step the new checkpoint is kept even if the N highest steps are later ones.
  save_checkpoint(run, sample_checkpoint(45), 1);
  EXPECT_EQ(folder_names(run / "checkpoints"), (std::vector<std::string>{"step_000045", "step_000050"}));
  for (int64_t step : {60, 70}) save_checkpoint(run, sample_checkpoint(step), 0);
  EXPECT_EQ(folder_names(run / "checkpoints").size(), 4u);
}

pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

TEST(Checkpoint, LatestIgnoresTemporaryAndIncompleteFolders) {
  const fs::path run = testing::temp_dir("ckpt_latest");
  EXPECT_EQ(latest_checkpoint(run), std::nullopt);
  const fs::path complete = save_checkpoint(run, sample_checkpoint(5), 0);
  const fs::path parent = run / "checkpoints";
  // A live writer's folder (ours) stays; a dead writer's goes; both are complete copies that must be ignored.
  const fs::path live = parent / (".step_000009.tmp-" + std::to_string(::getpid()));
  const fs::path stale = parent / (".step_000010.tmp-" + std::to_string(dead_pid()));
  fs::copy(complete, live);
  fs::copy(complete, stale);
  fs::create_directory(parent / "step_000011");  // final-named but empty: not complete
  fs::create_directory(parent / "step_notanumber");

  EXPECT_EQ(latest_checkpoint(run), complete);
  EXPECT_TRUE(fs::exists(live));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(load_checkpoint(run).step, 5);
}

TEST(Checkpoint, TruncatedCorruptOrMissingFilesAreClearErrors) {
  const fs::path run = testing::temp_dir("ckpt_corrupt");
  const fs::path folder = save_checkpoint(run, sample_checkpoint(4), 0);
  const fs::path model = folder / "model.safetensors";
  const std::string original = [&] {
    std::ifstream in(model, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();

  fs::resize_file(model, original.size() - 10);
  std::string message = load_error(folder);
  EXPECT_NE(message.find(model.string() + ": truncated"), std::string::npos) << message;

  std::string flipped = original;
  flipped.back() ^= 1;
  std::ofstream(model, std::ios::binary | std::ios::trunc) << flipped;
  message = load_error(folder);
  EXPECT_NE(message.find(model.string() + ": corrupt"), std::string::npos) << message;

  std::ofstream(model, std::ios::binary | std::ios::trunc) << original;
  EXPECT_EQ(load_checkpoint(folder).step, 4);

  fs::remove(folder / "tokenizer.json");
  message = load_error(folder);
  EXPECT_NE(message.find((folder / "tokenizer.json").string() + ": missing"), std::string::npos) << message;

  std::ofstream(folder / "state.json", std::ios::trunc) << "{\"step\": 4,";
  message = load_error(folder);
  EXPECT_NE(message.find((folder / "state.json").string() + ": not valid JSON"), std::string::npos) << message;

  message = load_error(run / "nowhere");
  EXPECT_NE(message.find("nowhere"), std::string::npos) << message;
}

// --- Optimizer state -------------------------------------------------------------------------------------

struct Batches {
  torch::Tensor inputs;   // [steps, batch, 4]
  torch::Tensor targets;  // [steps, batch, 3]
};

torch::nn::Sequential tiny_model(uint64_t seed) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Tanh(), torch::nn::Linear(8, 3));
}

NamedTensors named_parameters(const torch::nn::Sequential& model) {
  NamedTensors out;
  for (const auto& item : model->named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

torch::optim::AdamWOptions adamw_options(bool amsgrad) {
  return torch::optim::AdamWOptions(0.01).betas({0.9, 0.95}).weight_decay(0.1).amsgrad(amsgrad);
}

void train(torch::nn::Sequential& model, torch::optim::AdamW& optimizer, const Batches& data, int64_t from,
           int64_t to) {
  for (int64_t step = from; step < to; ++step) {
    optimizer.zero_grad();
    torch::mse_loss(model->forward(data.inputs[step]), data.targets[step]).backward();
    optimizer.step();
  }
}

// Trains 6 steps straight, and 3 steps + checkpoint + fresh model and optimizer + 3 steps; the weights must match
// bit for bit.
void expect_bitwise_resume(bool amsgrad) {
  torch::manual_seed(0);
  const Batches data{torch::randn({6, 5, 4}), torch::randn({6, 5, 3})};

  auto straight = tiny_model(1);
  torch::optim::AdamW straight_optimizer(straight->parameters(), adamw_options(amsgrad));
  train(straight, straight_optimizer, data, 0, 6);

  auto first = tiny_model(1);
  torch::optim::AdamW first_optimizer(first->parameters(), adamw_options(amsgrad));
  train(first, first_optimizer, data, 0, 3);
  CheckpointData saved;
  saved.step = 3;
  saved.model = named_parameters(first);
  saved.optimizer = export_adamw_state(first_optimizer, named_parameters(first));
  saved.state = {{"optimizer", adamw_hyperparameters(first_optimizer)}};
  const fs::path run = testing::temp_dir(amsgrad ? "optim_resume_amsgrad" : "optim_resume");
  save_checkpoint(run, saved, 0);

  const CheckpointData loaded = load_checkpoint(run);
  auto resumed = tiny_model(2);  // a different init, overwritten by the checkpoint
  torch::optim::AdamW resumed_optimizer(resumed->parameters(), torch::optim::AdamWOptions(0.5));
  NamedTensors parameters = named_parameters(resumed);
  std::map<std::string, torch::Tensor> weights(loaded.model.begin(), loaded.model.end());
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : parameters) p.copy_(weights.at(name));
  }
  std::reverse(parameters.begin(), parameters.end());  // the state is keyed by name, not by position
  import_adamw_state(resumed_optimizer, parameters, loaded.optimizer, "optimizer.safetensors");
  set_adamw_hyperparameters(resumed_optimizer, loaded.state["optimizer"], "state.json");
  train(resumed, resumed_optimizer, data, 3, 6);

  const auto expected = named_parameters(straight);
  const auto actual = named_parameters(resumed);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(expected[i].first, actual[i].first);
    EXPECT_TRUE(torch::equal(expected[i].second, actual[i].second)) << expected[i].first;
  }
}

// A ZeRO checkpoint: the ranks stage their optimizer shards, save_checkpoint moves them in and records their
// hashes; loading verifies them, reading is per shard, consolidation joins them. A shard that was not staged
// leaves no checkpoint; a shard count state.json cannot back is a clear error.
// NaN or inf is never written by training (FiniteCheckpoints.ANonFiniteTensorIsNeverWritten); a checkpoint that
// holds one anyway (here: a streamed tensor, as an import writes them, which the writer does not inspect) is
// refused by every reader at load, naming the file and the tensor.
TEST(Checkpoint, ANonFiniteTensorIsRefusedAtLoadByName) {
  const fs::path run = testing::temp_dir("ckpt_non_finite");
  CheckpointData data = sample_checkpoint(5);
  data.model.clear();
  data.model_planned = {{"embed.weight", torch::kFloat, {3}, [] { return torch::tensor({1.0f, NAN, 2.0f}); }}};
  const fs::path folder = save_checkpoint(run, data, 0);
  const std::string message = load_error(folder);
  EXPECT_NE(message.find((folder / "model.safetensors").string() + ": tensor 'embed.weight' holds NaN or inf"),
            std::string::npos)
      << message;
  fs::remove_all(run);
}

TEST(Checkpoint, OptimizerShardsAreCollectedVerifiedAndConsolidated) {
  const fs::path run = testing::temp_dir("ckpt_shards");
  CheckpointData data = sample_checkpoint(6);
  const NamedTensors shard0 = {{"embed.weight.exp_avg", torch::randn({8, 4})},
                               {"embed.weight.step", torch::tensor(int64_t{6})}};
  const NamedTensors shard1 = {{"norm.weight.exp_avg", torch::randn({4})}, {"norm.weight.step", torch::tensor(int64_t{6})}};
  data.optimizer.clear();
  data.optimizer_shards = 2;

  stage_optimizer_shard(run, 6, 0, 2, shard0);
  EXPECT_THROW(save_checkpoint(run, data, 0), std::runtime_error);  // rank 1 never staged
  EXPECT_FALSE(latest_checkpoint(run).has_value());

  stage_optimizer_shard(run, 6, 0, 2, shard0);
  stage_optimizer_shard(run, 6, 1, 2, shard1);
  const fs::path folder = save_checkpoint(run, data, 0);
  EXPECT_EQ(folder_names(run / "checkpoints"), std::vector<std::string>{"step_000006"});  // staging folder gone
  EXPECT_TRUE(fs::exists(folder / "optimizer.rank00001-of-00002.safetensors"));
  EXPECT_FALSE(fs::exists(folder / "optimizer.safetensors"));

  CheckpointData loaded = load_checkpoint(run);
  EXPECT_EQ(loaded.optimizer_shards, 2);
  EXPECT_TRUE(loaded.optimizer.empty());
  EXPECT_FALSE(loaded.state.contains("optimizer_shards"));
  expect_same_tensors(read_optimizer_shard(loaded, 1), shard1);
  consolidate_optimizer_shards(loaded);
  EXPECT_EQ(loaded.optimizer_shards, 0);
  NamedTensors both = shard0;
  both.insert(both.end(), shard1.begin(), shard1.end());
  expect_same_tensors(loaded.optimizer, both);

  const fs::path shard_file = folder / "optimizer.rank00000-of-00002.safetensors";
  fs::resize_file(shard_file, fs::file_size(shard_file) - 4);
  std::string message = load_error(folder);
  EXPECT_NE(message.find(shard_file.string() + ": truncated"), std::string::npos) << message;

  nlohmann::json state = nlohmann::json::parse(std::ifstream(folder / "state.json"));
  state["optimizer_shards"] = 1000000000;
  std::ofstream(folder / "state.json", std::ios::trunc) << state.dump();
  message = load_error(folder);
  EXPECT_NE(message.find("'optimizer_shards' must be a positive integer"), std::string::npos) << message;
}

TEST(CheckpointOptimizer, ResumedTrainingIsBitwiseIdentical) { expect_bitwise_resume(false); }
TEST(CheckpointOptimizer, ResumedTrainingIsBitwiseIdenticalWithAmsgrad) { expect_bitwise_resume(true); }

TEST(CheckpointOptimizer, StateKeyIsTheOneLibtorchUses) {
  auto model = tiny_model(3);
  torch::optim::AdamW optimizer(model->parameters(), adamw_options(false));
  const Batches data{torch::randn({1, 2, 4}), torch::randn({1, 2, 3})};
  train(model, optimizer, data, 0, 1);
  ASSERT_EQ(optimizer.state().size(), model->parameters().size());
  for (const auto& p : model->parameters()) EXPECT_EQ(optimizer.state().count(compat::optimizer_state_key(p)), 1u);
  const NamedTensors state = export_adamw_state(optimizer, named_parameters(model));
  EXPECT_EQ(state.size(), 3 * model->parameters().size());
  NamedTensors incomplete = named_parameters(model);
  incomplete.pop_back();
  EXPECT_THROW(export_adamw_state(optimizer, incomplete), std::invalid_argument);
}

TEST(CheckpointOptimizer, StateForAnotherModelIsAnInputError) {
  auto model = tiny_model(4);
  torch::optim::AdamW optimizer(model->parameters(), adamw_options(false));
  const NamedTensors parameters = named_parameters(model);
  EXPECT_THROW(import_adamw_state(optimizer, parameters, {{"9.weight.exp_avg", torch::zeros({1})}}, "o"), InputError);
  EXPECT_THROW(import_adamw_state(optimizer, parameters,
                                  {{"0.weight.exp_avg", torch::zeros({1})}, {"0.weight.exp_avg_sq", torch::zeros({1})},
                                   {"0.weight.step", torch::tensor(int64_t{1})}},
                                  "o"),
               InputError);
}

// A moment of another dtype than its parameter's (e.g. int32, from an edited file) is refused by name instead of
// being converted into other moments than a clean resume has.
TEST(CheckpointOptimizer, AMomentOfAnotherDtypeIsRefusedByName) {
  auto model = tiny_model(6);
  torch::optim::AdamW optimizer(model->parameters(), adamw_options(false));
  const NamedTensors parameters = named_parameters(model);
  const Batches data{torch::randn({1, 2, 4}), torch::randn({1, 2, 3})};
  train(model, optimizer, data, 0, 1);
  NamedTensors state = export_adamw_state(optimizer, parameters);
  import_adamw_state(optimizer, parameters, state, "o");  // as written: accepted
  for (auto& [key, tensor] : state)
    if (key == "0.weight.exp_avg") tensor = tensor.to(torch::kInt);
  const std::string message = testing::input_error_of([&] { import_adamw_state(optimizer, parameters, state, "o"); });
  EXPECT_NE(message.find("o: optimizer state '0.weight.exp_avg' is Int, the parameter's moments are Float"),
            std::string::npos)
      << message;
}

TEST(CheckpointOptimizer, StateMissingAParameterIsRefusedAndNoUpdateYetIsKept) {
  auto model = tiny_model(5);
  torch::optim::AdamW optimizer(model->parameters(), adamw_options(false));
  const NamedTensors parameters = named_parameters(model);
  // Before any update every parameter is recorded as "step 0, no moments".
  const NamedTensors fresh = export_adamw_state(optimizer, parameters);
  ASSERT_EQ(fresh.size(), parameters.size());
  import_adamw_state(optimizer, parameters, fresh, "o");
  EXPECT_TRUE(optimizer.state().empty());

  const Batches data{torch::randn({1, 2, 4}), torch::randn({1, 2, 3})};
  train(model, optimizer, data, 0, 1);
  NamedTensors state = export_adamw_state(optimizer, parameters);
  const std::string lost = parameters.back().first;
  state.erase(std::remove_if(state.begin(), state.end(),
                             [&](const auto& entry) { return entry.first.rfind(lost + ".", 0) == 0; }),
              state.end());
  try {
    import_adamw_state(optimizer, parameters, state, "optimizer.safetensors");
    FAIL() << "incomplete state was accepted";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("optimizer.safetensors: optimizer state is incomplete"), std::string::npos) << message;
    EXPECT_NE(message.find("'" + lost + "'"), std::string::npos) << message;
  }
}

// A wider checkpoint dtype than the model's would be rounded: refused. A narrower one (bf16 weights of a run with
// run.param_dtype = bf16) loads exactly.
TEST(CheckpointWeights, AWeightTheModelWouldRoundIsRefusedAndBf16LoadsExactly) {
  auto model = tiny_model(6);
  NamedTensors weights = named_parameters(model);
  weights.front().second = weights.front().second.to(torch::kDouble);
  const std::string message = testing::input_error_of([&] { load_module_weights(*model, weights, "step 3"); });
  EXPECT_NE(message.find("step 3: weight '" + weights.front().first + "' is Double, the model holds Float"),
            std::string::npos)
      << message;

  NamedTensors bf16;
  for (const auto& [name, w] : named_parameters(tiny_model(7))) bf16.emplace_back(name, w.detach().to(torch::kBFloat16));
  load_module_weights(*model, bf16, "step 4");
  const NamedTensors loaded = named_parameters(model);
  for (size_t k = 0; k < bf16.size(); ++k) {
    EXPECT_EQ(loaded[k].second.scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(loaded[k].second.detach(), bf16[k].second.to(torch::kFloat))) << bf16[k].first;
  }
  cast_parameters(*model, torch::kBFloat16);
  EXPECT_EQ(parameter_dtype(*model), torch::kBFloat16);
  const std::string narrowing =
      testing::input_error_of([&] { load_module_weights(*model, named_parameters(tiny_model(8)), "step 5"); });
  EXPECT_NE(narrowing.find("is Float, the model holds BFloat16"), std::string::npos) << narrowing;
}

// --- RNG state -------------------------------------------------------------------------------------------

TEST(CheckpointRng, RestoreReproducesTheSameDraws) {
  torch::manual_seed(11);
  torch::randn({3});  // an odd count leaves a cached normal sample inside the generator's state
  const nlohmann::json state = nlohmann::json::parse(capture_rng_state().dump());
  const torch::Tensor normal = torch::randn({5});
  const torch::Tensor uniform = torch::rand({4});
  const torch::Tensor tokens = torch::randint(1000, {6});
  torch::manual_seed(999);
  restore_rng_state(state, "state.json");
  EXPECT_TRUE(torch::equal(torch::randn({5}), normal));
  EXPECT_TRUE(torch::equal(torch::rand({4}), uniform));
  EXPECT_TRUE(torch::equal(torch::randint(1000, {6}), tokens));
}

TEST(CheckpointRng, MalformedStateIsAnInputError) {
  EXPECT_THROW(restore_rng_state({{"cpu", "not base64!"}}, "state.json"), InputError);
  EXPECT_THROW(restore_rng_state({{"cpu", "AAAA"}}, "state.json"), InputError);
  EXPECT_THROW(restore_rng_state(nlohmann::json::object(), "state.json"), InputError);
}

}  // namespace
}  // namespace inkstone
