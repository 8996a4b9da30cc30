#include "train/metrics_log.h"

#include <fmt/format.h>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

#include "core/atomic_file.h"
#include "core/errors.h"

namespace inkstone {
namespace {

nlohmann::json finite_or_text(const nlohmann::json& value) {
  if (value.is_number_float()) {
    const double x = value.get<double>();
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    return value;
  }
  if (value.is_structured()) {
    nlohmann::json out = value;
    for (auto& item : out) item = finite_or_text(item);
    return out;
  }
  return value;
}

// Keeps the lines up to `resumed_step`; only the last line may be partial (the kill came mid-write).
void truncate_after(const std::filesystem::path& path, int64_t resumed_step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::ostringstream whole;
  whole << in.rdbuf();
  const std::string text = whole.str();

  std::string kept;
  size_t begin = 0;
  for (int64_t line_number = 1; begin < text.size(); ++line_number) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.empty()) continue;
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer())
      throw InputError(fmt::format("{}:{}: not a metrics record (a JSON object with an integer step)", path.string(),
                                   line_number));
    if (record["step"].get<int64_t>() <= resumed_step) kept += line + '\n';
  }
  write_file_atomic(path, kept);
}

}  // namespace

MetricsLog::MetricsLog(std::filesystem::path path, std::optional<int64_t> resumed_step) : path_(std::move(path)) {
  if (resumed_step) truncate_after(path_, *resumed_step);
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error("cannot open " + path_.string() + " for appending");
}

void MetricsLog::append(const nlohmann::json& record) {
  if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer())
    throw std::invalid_argument("MetricsLog::append: a record is a JSON object with an integer 'step'");
  // Invalid UTF-8 in a string is replaced rather than thrown: a metrics line must never stop a run.
  out_ << finite_or_text(record).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n'
       << std::flush;
  if (!out_) throw std::runtime_error("cannot write to " + path_.string());
}

}  // namespace inkstone
