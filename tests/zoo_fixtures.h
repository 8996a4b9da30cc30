// The backbone zoo (configs/zoo/*.toml) for tests: the variant names, and the overrides that shrink a variant's
// architecture to width 48 and context 32 while keeping its blocks, routing and widths profile.
#pragma once
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config.h"
#include "tests/test_paths.h"

namespace inkstone::testing {

inline std::filesystem::path zoo_config_path(const std::string& name) {
  return source_dir() / "configs" / "zoo" / (name + ".toml");
}

inline std::vector<std::string> zoo_config_names() {
  std::vector<std::string> names;
  const auto dir = source_dir() / "configs" / "zoo";
  if (std::filesystem::is_directory(dir))
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      if (entry.path().extension() == ".toml") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline std::vector<std::string> tiny_zoo_model_overrides(const Config& config) {
  std::vector<std::string> overrides = {"model.d_model=48",     "model.n_heads=4",       "model.n_kv_heads=2",
                                        "model.head_dim=0",     "model.ffn_dim=0",       "model.max_seq_len=32",
                                        "model.cond_dim=16",    "model.width_quantum=8", "data.seq_len=32"};
  if (config.model.moe_expert_ffn_dim > 0) overrides.push_back("model.moe_expert_ffn_dim=32");
  return overrides;
}

// A gtest parameter name for a variant (gtest names allow no '-').
inline std::string zoo_test_name(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace inkstone::testing
