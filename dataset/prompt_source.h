// Prompts for reinforcement learning: the interface a task set (GSM8K, MATH-500, ...) implements, and a
// deterministic way to draw from one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/counter_hash.h"

namespace inkstone {

struct Prompt {
  std::string id;          // stable within its source, e.g. "gsm8k/test/17", so results can be joined later
  std::string text;        // what the policy is given
  nlohmann::json answer;   // what the source's reward checks against; its shape belongs to the source
};

class PromptSource {
 public:
  virtual ~PromptSource() = default;
  virtual int64_t size() const = 0;
  // 0 <= index < size().
  virtual Prompt get(int64_t index) const = 0;
};

// `count` prompt indices for one step on one rank, with replacement: like WindowLoader's training windows a pure
// function of (seed, step, rank * count + i), so a resumed run draws the same prompts and ranks draw different ones.
inline std::vector<int64_t> draw_prompt_indices(int64_t source_size, uint64_t seed, int64_t step, int64_t rank,
                                                int64_t count) {
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t hash = counter_hash({seed, static_cast<uint64_t>(step), static_cast<uint64_t>(rank * count + i)});
    indices.push_back(static_cast<int64_t>(hash_below(hash, static_cast<uint64_t>(source_size))));
  }
  return indices;
}

inline std::vector<Prompt> draw_prompts(const PromptSource& source, uint64_t seed, int64_t step, int64_t rank,
                                        int64_t count) {
  std::vector<Prompt> prompts;
  for (int64_t index : draw_prompt_indices(source.size(), seed, step, rank, count)) prompts.push_back(source.get(index));
  return prompts;
}

}  // namespace inkstone
