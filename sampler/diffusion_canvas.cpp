#include "sampler/diffusion_canvas.h"

#include <algorithm>
#include <regex>

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/errors.h"

namespace inkstone {
namespace {

void append_fixed(CanvasRow& row, const std::vector<int32_t>& ids) {
  row.tokens.insert(row.tokens.end(), ids.begin(), ids.end());
  row.fixed.insert(row.fixed.end(), ids.size(), true);
}

void append_generated(CanvasRow& row, int64_t count) {
  row.tokens.insert(row.tokens.end(), static_cast<size_t>(count), 0);
  row.fixed.insert(row.fixed.end(), static_cast<size_t>(count), false);
}

}  // namespace

CanvasRow prefix_row(const std::vector<int32_t>& prompt, int64_t new_tokens) {
  if (new_tokens < 1) throw InputError(fmt::format("new tokens = {} must be >= 1", new_tokens));
  CanvasRow row;
  append_fixed(row, prompt);
  append_generated(row, new_tokens);
  return row;
}

CanvasRow infill_row(const std::string& text, const Tokenizer& tokenizer) {
  static const std::regex placeholder(R"(\{\{(\d+)\}\})");
  CanvasRow row;
  size_t consumed = 0;
  int64_t generated = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), placeholder); it != std::sregex_iterator(); ++it) {
    const auto& match = *it;
    append_fixed(row, tokenizer.encode(text.substr(consumed, static_cast<size_t>(match.position()) - consumed)));
    const std::string digits = match[1].str();
    const int64_t count = digits.size() > 7 ? 0 : std::stoll(digits);  // 8+ digits are past the bound anyway
    if (count < 1 || count > 1 << 20)
      throw InputError(fmt::format("infill placeholder '{}' must ask for 1 to 1048576 tokens", match.str()));
    append_generated(row, count);
    generated += count;
    consumed = static_cast<size_t>(match.position() + match.length());
  }
  append_fixed(row, tokenizer.encode(text.substr(consumed)));
  if (generated == 0)
    throw InputError(fmt::format("infill template '{}' has no placeholder such as {{{{16}}}}", text));
  return row;
}

DiffusionCanvas make_canvas(const std::vector<CanvasRow>& layouts, int64_t copies) {
  if (layouts.empty() || copies < 1) throw InputError("a diffusion canvas needs at least one row");
  size_t length = 0;
  for (const auto& row : layouts) length = std::max(length, row.tokens.size());
  const int64_t rows = static_cast<int64_t>(layouts.size()) * copies;
  auto tokens = torch::zeros({rows, static_cast<int64_t>(length)}, torch::kLong);
  auto fixed = torch::zeros({rows, static_cast<int64_t>(length)}, torch::kBool);
  auto tokens_at = tokens.accessor<int64_t, 2>();
  auto fixed_at = fixed.accessor<bool, 2>();
  for (int64_t r = 0; r < rows; ++r) {
    const auto& layout = layouts[static_cast<size_t>(r / copies)];
    for (size_t i = 0; i < layout.tokens.size(); ++i) {
      tokens_at[r][static_cast<int64_t>(i)] = layout.tokens[i];
      fixed_at[r][static_cast<int64_t>(i)] = layout.fixed[i];
    }
  }
  return {tokens, fixed};
}

}  // namespace inkstone
