// docs/config.md is what `inkstone train --print-reference` writes from the schema and the registries: a key, a
// default, an allowed value or a registered objective added in code without the document fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "config/config_schema.h"
#include "models/block_registry.h"
#include "objectives/objective.h"
#include "sampler/diffusion_sampler.h"
#include "tests/test_paths.h"
#include "tools/config_reference.h"

namespace inkstone {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ConfigReference, TheDocumentIsWhatTheCodeWrites) {
  const auto document = testing::source_dir() / "docs" / "config.md";
  ASSERT_TRUE(std::filesystem::exists(document)) << document;
  EXPECT_EQ(read_file(document), config_reference_markdown())
      << "docs/config.md is stale: regenerate it with `inkstone train --print-reference > docs/config.md`";
}

TEST(ConfigReference, ListsEveryKeyAndEveryRegisteredObjective) {
  const std::string reference = config_reference_markdown();
  for (const auto& field : config_schema())
    EXPECT_NE(reference.find("| `" + field.key + "` |"), std::string::npos) << field.name();
  for (const auto& name : registered_objective_names())
    EXPECT_NE(reference.find("`" + name + "`"), std::string::npos) << name;
  for (const char* rl : {"`gflowrl`", "`grpo`", "`flowrl`"}) EXPECT_NE(reference.find(rl), std::string::npos) << rl;
}

// The schema sits below the registries, so the defaults of the keys they own (the objective, the block letters, the
// diffusion sampler and final step) are written there as data: each must stay a registered name.
TEST(ConfigReference, TheDefaultsOfRegistryOwnedKeysAreRegisteredNames) {
  const Config defaults = default_config();
  const auto objectives = registered_objective_names();
  EXPECT_NE(std::find(objectives.begin(), objectives.end(), defaults.objective.name), objectives.end())
      << defaults.objective.name;
  EXPECT_NO_THROW(check_block_patterns(defaults.model));
  EXPECT_NO_THROW(diffusion_method_from_name(defaults.sample.diffusion_sampler));
  EXPECT_NO_THROW(noise_removal_from_name(defaults.sample.noise_removal));
}

}  // namespace
}  // namespace inkstone
