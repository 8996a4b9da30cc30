// MATH-style problem sets (MATH-500 and its kin) as a PromptSource: a JSON array of {problem, answer} objects, the
// answer being LaTeX text that the policy's last \boxed{} is compared with (docs/rl.md, "MATH").
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "rl/task_registry.h"

namespace inkstone {
namespace {

class MathSource final : public PromptSource {
 public:
  explicit MathSource(const TaskOptions& options) {
    std::ifstream in = open_input_file(options.path, "problem file");
    const auto items = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (items.is_discarded()) throw InputError(fmt::format("{}: not valid JSON", options.path));
    if (!items.is_array() || items.empty()) {
      throw InputError(fmt::format("{}: expected a non-empty JSON array of {{problem, answer}} objects", options.path));
    }
    const std::string stem = std::filesystem::path(options.path).stem().string();
    for (size_t i = 0; i < items.size(); ++i) {
      const auto& item = items[i];
      if (!item.is_object() || !item.contains("problem") || !item["problem"].is_string()) {
        throw InputError(fmt::format("{}: item {} has no string field 'problem'", options.path, i));
      }
      // An answer stored as a JSON number is compared as its text.
      const auto answer = item.contains("answer") ? item["answer"] : nlohmann::json();
      if (!answer.is_string() && !answer.is_number()) {
        throw InputError(fmt::format("{}: item {} has no string or number field 'answer'", options.path, i));
      }
      prompts_.push_back({fmt::format("math/{}/{}", stem, i),
                          render_prompt(options.prompt_template, item["problem"].get<std::string>()),
                          answer.is_string() ? answer.get<std::string>() : answer.dump()});
    }
  }

  int64_t size() const override { return static_cast<int64_t>(prompts_.size()); }
  Prompt get(int64_t index) const override { return prompts_.at(static_cast<size_t>(index)); }

 private:
  std::vector<Prompt> prompts_;
};

}  // namespace

std::unique_ptr<PromptSource> make_math_source(const TaskOptions& options) {
  return std::make_unique<MathSource>(options);
}

}  // namespace inkstone
