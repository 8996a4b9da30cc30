#include "train/tensorboard_log.h"

#include <chrono>
#include <sstream>

#include "train/metric_tags.h"

namespace inkstone {
namespace {

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string as_markdown_code(const std::string& text) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) out += "    " + line + "\n";
  return out;
}

TensorBoardLog::TensorBoardLog(const std::filesystem::path& run_dir, std::optional<int64_t> resumed_step)
    : writer_(run_dir, resumed_step) {}

void TensorBoardLog::append(const nlohmann::json& line) {
  tensorboard::Event event;
  event.wall_time = wall_time_now();
  event.step = line.at("step").get<int64_t>();
  for (const auto& [tag, value] : tagged_values(line)) event.scalars.emplace_back(tag, static_cast<float>(value));
  if (line.contains("samples") && line["samples"].is_array()) {
    const auto& samples = line["samples"];
    for (size_t i = 0; i < samples.size(); ++i)
      event.texts.emplace_back("samples/" + std::to_string(i),
                               as_markdown_code(samples[i].value("prompt", "") + samples[i].value("text", "")));
  }
  if (!event.scalars.empty() || !event.texts.empty()) writer_.write(event);
}

void TensorBoardLog::text(int64_t step, const std::string& tag, const std::string& text) {
  tensorboard::Event event;
  event.wall_time = wall_time_now();
  event.step = step;
  event.texts.emplace_back(tag, as_markdown_code(text));
  writer_.write(event);
}

}  // namespace inkstone
