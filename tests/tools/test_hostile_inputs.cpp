// Hostile inputs (docs/reliability.md): valid files mutated with fixed seeds, files that are not files, and
// out-of-range options, each run through the CLI under a time limit. Every case must end by itself, exit 0 (a
// harmless mutation) or exit 1 / 2 with exactly one "error:" line and no libtorch stack dump; a file guarded by a
// checksum must always be refused. Each family prints its tally of outcomes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "tests/cli_run.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;

constexpr int kCaseSeconds = 60;  // a case that has not ended by then is a hang

enum class Expect { refusal, any_clean_end };

struct Outcome {
  std::map<int, int> exit_codes;  // exit code -> cases
  int cases = 0;
};

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const fs::path& path, const std::string& bytes) {
  fs::remove(path);
  std::ofstream(path, std::ios::binary) << bytes;
}

int count_error_lines(const std::string& output) {
  int lines = 0;
  for (size_t at = output.find("error:"); at != std::string::npos; at = output.find("error:", at + 1))
    if (at == 0 || output[at - 1] == '\n') ++lines;
  return lines;
}

// Runs one case and checks how it ended; `label` names it in a failure.
void run_case(const std::string& label, std::vector<std::string> args, Expect expect, Outcome& outcome) {
  args.insert(args.begin(), {"timeout", "-s", "KILL", std::to_string(kCaseSeconds), testing::cli_binary().string()});
  const auto result = testing::run_command(args);
  ++outcome.cases;
  ++outcome.exit_codes[result.exit_code];
  const std::string& out = result.output;
  EXPECT_NE(result.exit_code, 137) << label << ": did not end within " << kCaseSeconds << " s";
  // "[json.exception...": the JSON library's own text instead of the key and type in words (core/json_error.h).
  for (const char* dump : {"Exception raised from", "frame #", "terminate called", "Segmentation fault", "Aborted",
                           "[json.exception"})
    EXPECT_EQ(out.find(dump), std::string::npos) << label << ": " << dump << "\n" << out;
  if (expect == Expect::refusal) {
    EXPECT_EQ(result.exit_code, 2) << label << "\n" << out;
  } else {
    EXPECT_TRUE(result.exit_code == 0 || result.exit_code == 1 || result.exit_code == 2) << label << "\n" << out;
  }
  if (result.exit_code != 0) EXPECT_EQ(count_error_lines(out), 1) << label << "\n" << out;
}

void print_tally(const std::string& family, const Outcome& outcome) {
  std::string codes;
  for (const auto& [code, n] : outcome.exit_codes) codes += " exit " + std::to_string(code) + ": " + std::to_string(n) + ";";
  std::printf("hostile inputs, %s: %d cases;%s\n", family.c_str(), outcome.cases, codes.c_str());
}

// Byte-level mutations of a file: a flipped byte, a truncation, appended garbage.
std::string mutate_bytes(const std::string& bytes, int kind, std::mt19937_64& rng) {
  std::string out = bytes;
  const size_t at = out.empty() ? 0 : rng() % out.size();
  switch (kind) {
    case 0: out[at] = static_cast<char>(out[at] ^ (1 + rng() % 255)); break;
    case 1: out.resize(at); break;
    default: out += std::string(1 + rng() % 64, static_cast<char>(rng() % 256)); break;
  }
  return out;
}

// A trained two-step run on the word corpus, shared by the families.
class HostileInputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::temp_dir("hostile"));
    const auto data = testing::prepare_word_corpus(*dir_);
    config_ = new fs::path(*dir_ / "tiny.toml");
    std::ofstream(*config_) << "[run]\nthreads = 1\ndevice = \"cpu\"\n"
                            << "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\nmax_seq_len = 32\n"
                            << "[data]\npath = \"" << data.string() << "\"\nseq_len = 16\n"
                            << "[train]\nsteps = 2\nbatch_size = 4\nlog_interval = 1\neval_interval = 0\n"
                            << "checkpoint_interval = 0\n"
                            << "[sample]\nmax_new_tokens = 4\nnum = 1\n";
    const auto trained = testing::run_cli({"train", config_->string(), "--run-dir", (*dir_ / "run").string()});
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete config_;
  }

  static fs::path checkpoint() { return *latest_checkpoint(*dir_ / "run"); }

  // A fresh copy of `source` under a case folder, for one mutation.
  static fs::path copy_of(const fs::path& source, const std::string& name) {
    const auto target = *dir_ / "cases" / name;
    fs::remove_all(target);
    fs::create_directories(target.parent_path());
    fs::copy(source, target, fs::copy_options::recursive);
    return target;
  }

  static fs::path* dir_;
  static fs::path* config_;
};

fs::path* HostileInputs::dir_ = nullptr;
fs::path* HostileInputs::config_ = nullptr;

// Every file of a checkpoint but state.json is covered by the xxh64 that state.json records.
// Every command verifies the files it reads: sampling reads the model, its config and its tokenizer; rewriting a
// checkpoint (`checkpoint consolidate`) reads the optimizer state too.
TEST_F(HostileInputs, CorruptCheckpointFilesAreRefused) {
  Outcome outcome;
  std::mt19937_64 rng(2026);
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "config.toml", "tokenizer.json"}) {
    for (int kind = 0; kind < 3; ++kind) {
      for (int seed = 0; seed < 2; ++seed) {
        const auto folder = copy_of(checkpoint(), "checkpoint");
        write_all(folder / file, mutate_bytes(read_all(folder / file), kind, rng));
        const std::vector<std::string> reader =
            std::string(file) == "optimizer.safetensors"
                ? std::vector<std::string>{"checkpoint", "consolidate", folder.string(), "--out",
                                           (folder.parent_path() / (folder.filename().string() + "-out")).string()}
                : std::vector<std::string>{"sample", "--checkpoint", folder.string(), "--prompt", "the cat"};
        run_case(fmt::format("{} mutation {} #{}", file, kind, seed), reader, Expect::refusal, outcome);
      }
    }
  }
  print_tally("checkpoint files", outcome);
}

// state.json is the record itself: every key with values of other types, out of range, or missing.
TEST_F(HostileInputs, MalformedCheckpointStateEndsCleanly) {
  Outcome outcome;
  const nlohmann::json original = nlohmann::json::parse(read_all(checkpoint() / "state.json"));
  const std::vector<nlohmann::json> values = {"x", -1, nullptr, nlohmann::json::array(), 1e300, 4611686018427387904};
  for (const auto& [key, unused] : original.items()) {
    std::vector<std::optional<nlohmann::json>> replacements(values.begin(), values.end());
    replacements.push_back(std::nullopt);  // the key removed
    for (size_t v = 0; v < replacements.size(); ++v) {
      const auto run = copy_of(*dir_ / "run", "state_run");
      const auto folder = *latest_checkpoint(run);
      nlohmann::json state = original;
      if (replacements[v]) state[key] = *replacements[v];
      else state.erase(key);
      write_all(folder / "state.json", state.dump());
      run_case(fmt::format("state.json '{}' = {}", key, replacements[v] ? replacements[v]->dump() : "(missing)"),
               {"train", config_->string(), "--run-dir", run.string(), "--resume", "--set", "train.steps=3"},
               Expect::any_clean_end, outcome);
    }
  }
  print_tally("checkpoint state", outcome);
}

// A JSON value of the wrong type or a missing key is refused by file and key path, in words.
TEST_F(HostileInputs, JsonRefusalsNameTheFileTheKeyAndTheType) {
  const fs::path data = *dir_ / "data";
  const nlohmann::json manifest = nlohmann::json::parse(read_all(data / "manifest.json"));
  const auto refusal = [&](const nlohmann::json& edited) {
    const auto folder = copy_of(data, "data");
    write_all(folder / "manifest.json", edited.dump());
    const auto result = testing::run_cli({"train", config_->string(), "--run-dir", (*dir_ / "cases" / "json_run").string(),
                                          "--set", "data.path=" + folder.string(), "--set", "train.steps=1"});
    fs::remove_all(*dir_ / "cases" / "json_run");
    EXPECT_EQ(result.exit_code, 2) << result.output;
    return result.output;
  };
  nlohmann::json wrong_type = manifest;
  wrong_type["splits"]["train"]["shards"][0]["tokens"] = "many";
  const auto typed = refusal(wrong_type);
  EXPECT_NE(typed.find("manifest.json: key 'splits/train/shards/0/tokens' must be a number, not a string"),
            std::string::npos) << typed;
  nlohmann::json missing = manifest;
  missing["validation"].erase("rule");
  const auto absent = refusal(missing);
  EXPECT_NE(absent.find("manifest.json: key 'validation/rule' is missing"), std::string::npos) << absent;
}

// The data folder: manifest fields changed one at a time, and shard bytes (checksummed) mutated.
TEST_F(HostileInputs, TamperedDataFoldersAreRefused) {
  Outcome outcome;
  const fs::path data = *dir_ / "data";
  const nlohmann::json manifest = nlohmann::json::parse(read_all(data / "manifest.json"));
  const std::vector<std::pair<std::string, nlohmann::json>> edits = {
      {"/tokenizer/vocab_size", 300},       {"/tokenizer/vocab_size", 0},        {"/tokenizer/vocab_size", "x"},
      {"/tokenizer/eos", 9999},             {"/tokenizer/pad", -7},              {"/tokenizer/kind", "bpe"},
      {"/byte_order", "big"},               {"/dtype", "uint8"},                 {"/dtype", "uint32"},
      {"/format_version", 99},              {"/splits/train/shards/0/file", "../tiny.toml"},
      {"/splits/train/shards/0/file", "/etc/hostname"}, {"/splits/train/shards/0/tokens", -5},
      {"/splits/train/shards/0/tokens", 1},  {"/splits/train/shards/0/xxh64", "0000000000000000"},
      {"/splits/train", nullptr},           {"/splits", "x"},                    {"/tokenizer", 3}};
  for (const auto& [pointer, value] : edits) {
    const auto folder = copy_of(data, "data");
    nlohmann::json edited = manifest;
    edited[nlohmann::json::json_pointer(pointer)] = value;
    write_all(folder / "manifest.json", edited.dump());
    run_case(fmt::format("manifest {} = {}", pointer, value.dump()),
             {"train", config_->string(), "--run-dir", (*dir_ / "cases" / "data_run").string(), "--set",
              "data.path=" + folder.string(), "--set", "train.steps=1"},
             Expect::refusal, outcome);
    fs::remove_all(*dir_ / "cases" / "data_run");
  }
  std::mt19937_64 rng(7);
  for (int kind = 0; kind < 3; ++kind) {
    const auto folder = copy_of(data, "data");
    const auto shard = folder / manifest["splits"]["train"]["shards"][0]["file"].get<std::string>();
    write_all(shard, mutate_bytes(read_all(shard), kind, rng));
    run_case(fmt::format("shard mutation {}", kind),
             {"train", config_->string(), "--run-dir", (*dir_ / "cases" / "data_run").string(), "--set",
              "data.path=" + folder.string(), "--set", "train.steps=1"},
             Expect::refusal, outcome);
    fs::remove_all(*dir_ / "cases" / "data_run");
  }
  print_tally("data folders", outcome);
}

// Paths that are not regular files: each would block (a FIFO), never end (/dev/zero) or read as empty (a folder).
TEST_F(HostileInputs, PathsThatAreNotFilesAreRefusedWithoutWaiting) {
  Outcome outcome;
  const auto cases = *dir_ / "cases" / "not_files";
  fs::create_directories(cases);
  const auto fifo = cases / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto zero_link = cases / "zero";
  fs::create_symlink("/dev/zero", zero_link);
  for (const fs::path& path : {fifo, zero_link, cases}) {
    const std::string p = path.string();
    run_case("config " + p, {"train", p, "--run-dir", (cases / "run").string()}, Expect::refusal, outcome);
    run_case("prompts file " + p, {"sample", "--run-dir", (*dir_ / "run").string(), "--prompts-file", p},
             Expect::refusal, outcome);
    run_case("tokenizer " + p, {"tokenizer", "encode", "--tokenizer", p, "--text", "hi"}, Expect::refusal, outcome);
    run_case("token ids " + p, {"eval", "--run-dir", (*dir_ / "run").string(), "--token-ids", p, "--dump-logits",
                                (cases / "logits.safetensors").string()},
             Expect::refusal, outcome);
    for (const char* file : {"state.json", "model.safetensors"}) {
      const auto folder = copy_of(checkpoint(), "checkpoint");
      fs::remove(folder / file);
      fs::create_symlink(path, folder / file);
      run_case(std::string(file) + " " + p, {"sample", "--checkpoint", folder.string(), "--prompt", "a"},
               Expect::refusal, outcome);
    }
    const auto data = copy_of(*dir_ / "data", "data");
    const auto shard = data / "train_00000.bin";
    fs::remove(shard);
    fs::create_symlink(path, shard);
    run_case("shard " + p,
             {"train", config_->string(), "--run-dir", (cases / "run").string(), "--set", "data.path=" + data.string()},
             Expect::refusal, outcome);
  }
  print_tally("paths that are not files", outcome);
}

// Command-line values and settings out of range, NaN, or far beyond the machine.
TEST_F(HostileInputs, OutOfRangeOptionsAreRefusedByName) {
  Outcome outcome;
  const std::string run = (*dir_ / "run").string();
  const std::vector<std::vector<std::string>> samples = {
      {"--num", "0"},          {"--num", "-3"},           {"--num", "99999999999999999999"},
      {"--temperature", "nan"}, {"--temperature", "-1"},   {"--top-p", "0"},
      {"--top-p", "nan"},      {"--max-new-tokens", "100000"}, {"--steps", "0"},
      {"--seed", "-1"},        {"--seed", "9223372036854775808"}, {"--seed", "+99999999999999999999"},
      {"--device", "cuda:99999999999"}, {"--prompt", std::string(100000, 'a')},
      {"--infill", "a {{99999999999999999999}} b"}};
  for (const auto& extra : samples) {
    std::vector<std::string> args = {"sample", "--run-dir", run};
    args.insert(args.end(), extra.begin(), extra.end());
    run_case("sample " + extra.front() + " " + extra.back().substr(0, 24), args, Expect::refusal, outcome);
  }
  const std::vector<std::string> settings = {
      "optim.learning_rate=nan", "optim.learning_rate=0", "model.init_std=0", "model.rope_theta=0",
      "model.norm_eps=0",        "run.threads=1000",      "model.vocab_size=4000000000", "model.d_model=65536",
      "sample.temperature=nan",  "optim.beta1=nan",       "optim.weight_decay=inf",   "train.batch_size=0",
      "data.seq_len=100000",     "model.n_layers=0",      "sample.diffusion_sampler=\"ancestal\"",
      "sample.noise_removal=\"argmax\"", "run.param_dtype=\"fp16\""};
  for (const auto& setting : settings)
    run_case("train --set " + setting,
             {"train", config_->string(), "--run-dir", (*dir_ / "cases" / "settings_run").string(), "--set", setting},
             Expect::refusal, outcome);
  print_tally("options and settings", outcome);
}

}  // namespace
}  // namespace inkstone
