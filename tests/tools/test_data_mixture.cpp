// Data mixtures from the CLI (docs/training.md, "Data mixtures"): a run on two folders reports validation per
// folder and their weighted mean; malformed entries, data.path beside data.mixture and two folders of one name are
// refused by key.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/cli_run.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

class DataMixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::temp_dir("data_mixture"));
    testing::prepare_word_corpus(*dir_);  // dir/data
    std::ofstream digits(*dir_ / "digits.txt");
    for (int line = 0; line < 40; ++line) digits << (line * 7919) % 100000 << " " << (line * 104729) % 1000 << "\n";
    digits.close();
    const auto prepared = run_cli({"data", "prepare", "--input", (*dir_ / "digits.txt").string(), "--tokenizer",
                                   "byte", "--out", (*dir_ / "digits").string(), "--val-fraction", "0.3",
                                   "--val-split", "tail"});
    ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
    std::ofstream(*dir_ / "mix.toml") << "[run]\nthreads = 1\ndevice = \"cpu\"\n"
                                      << "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\n"
                                      << "max_seq_len = 16\n"
                                      << "[data]\nseq_len = 8\nmixture = [\"" << (*dir_ / "data").string()
                                      << "=2\", \"" << (*dir_ / "digits").string() << "=1\"]\n"
                                      << "[train]\nsteps = 3\nbatch_size = 4\neval_interval = 3\n";
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string config() { return (*dir_ / "mix.toml").string(); }
  static fs::path* dir_;
};
fs::path* DataMixture::dir_ = nullptr;

TEST_F(DataMixture, ValidationIsReportedPerFolderAndAsTheWeightedMean) {
  const auto run = *dir_ / "run";
  const auto trained = run_cli({"train", config(), "--run-dir", run.string()});
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_NE(trained.output.find("(data "), std::string::npos) << trained.output;
  EXPECT_NE(trained.output.find(", digits "), std::string::npos) << trained.output;
  std::ifstream metrics(run / "metrics.jsonl");
  nlohmann::json val;
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.value("split", "") == "val") val = record;
  }
  ASSERT_TRUE(val.contains("val_data_loss_nats")) << val.dump();
  ASSERT_TRUE(val.contains("val_digits_loss_nats")) << val.dump();
  const double mean = (2 * val["val_data_loss_nats"].get<double>() + val["val_digits_loss_nats"].get<double>()) / 3;
  EXPECT_NEAR(val["loss_nats"].get<double>(), mean, 1e-9 * mean);

  // eval names the folder it scores: a mixture run has no single data.path.
  const auto eval = run_cli({"eval", "--run-dir", run.string()});
  EXPECT_EQ(eval.exit_code, 2) << eval.output;
  EXPECT_NE(eval.output.find("pass --data FOLDER"), std::string::npos) << eval.output;
  const auto one = run_cli({"eval", "--run-dir", run.string(), "--data", (*dir_ / "digits").string()});
  EXPECT_EQ(one.exit_code, 0) << one.output;
}

TEST_F(DataMixture, MalformedMixturesAreRefusedByKey) {
  const auto refused = [&](const std::vector<std::string>& sets) {
    std::vector<std::string> args = {"train", config(), "--run-dir", (*dir_ / "refused").string()};
    for (const auto& set : sets) args.insert(args.end(), {"--set", set});
    return run_cli(args);
  };
  const auto weightless = refused({"data.mixture=[\"" + (*dir_ / "data").string() + "\"]"});
  EXPECT_EQ(weightless.exit_code, 2) << weightless.output;
  EXPECT_NE(weightless.output.find("data.mixture[0] = '" + (*dir_ / "data").string() +
                                   "' must be \"folder=weight\" with a positive weight"),
            std::string::npos)
      << weightless.output;
  const auto both = refused({"data.path=\"" + (*dir_ / "data").string() + "\""});
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_NE(both.output.find("and data.mixture both name training data"), std::string::npos) << both.output;
  const auto twice = refused({"data.mixture=[\"" + (*dir_ / "data").string() + "=1\", \"" +
                              (*dir_ / "." / "data").string() + "=1\"]"});
  EXPECT_EQ(twice.exit_code, 2) << twice.output;
  EXPECT_NE(twice.output.find("is also named 'data'"), std::string::npos) << twice.output;
}

}  // namespace
}  // namespace inkstone
