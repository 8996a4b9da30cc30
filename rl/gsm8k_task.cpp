// GSM8K (openai/grade-school-math) as a PromptSource: one {question, answer} object per line, the reference being
// the number after the solution's "####" (docs/rl.md, "GSM8K").
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "rl/answer_extraction.h"
#include "rl/task_registry.h"

namespace inkstone {
namespace {

class Gsm8kSource final : public PromptSource {
 public:
  explicit Gsm8kSource(const TaskOptions& options) {
    std::ifstream in = open_input_file(options.path, "GSM8K file");
    const std::string stem = std::filesystem::path(options.path).stem().string();
    std::string line;
    for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const auto where = [&] { return fmt::format("{}:{}", options.path, line_number); };
      const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_discarded()) throw InputError(where() + ": not valid JSON");
      for (const char* field : {"question", "answer"}) {
        if (!record.is_object() || !record.contains(field) || !record[field].is_string()) {
          throw InputError(fmt::format("{}: no string field '{}'", where(), field));
        }
      }
      const auto reference = extract_marked_number(record["answer"].get<std::string>());
      if (!reference) throw InputError(where() + ": the answer has no final '#### N'");
      if (!parse_number(*reference))
        throw InputError(fmt::format("{}: the reference '{}' is not a number an answer can equal (a zero "
                                     "denominator, or beyond 64-bit parts)",
                                     where(), *reference));
      prompts_.push_back({fmt::format("gsm8k/{}/{}", stem, line_number),
                          render_prompt(options.prompt_template, record["question"].get<std::string>()), *reference});
    }
    if (prompts_.empty()) throw InputError(fmt::format("{}: no problems in the GSM8K file", options.path));
  }

  int64_t size() const override { return static_cast<int64_t>(prompts_.size()); }
  Prompt get(int64_t index) const override { return prompts_.at(static_cast<size_t>(index)); }

 private:
  std::vector<Prompt> prompts_;
};

}  // namespace

std::unique_ptr<PromptSource> make_gsm8k_source(const TaskOptions& options) {
  return std::make_unique<Gsm8kSource>(options);
}

}  // namespace inkstone
