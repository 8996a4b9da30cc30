#include "dataset/pretokenizer.h"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "core/errors.h"
#include "dataset/tokenizer_json.h"

namespace inkstone {
namespace {

struct ByteLevelTable {
  std::array<std::string, 256> char_of_byte;
  // Code points used by the alphabet are below U+0144; index by code point.
  std::array<int16_t, 512> byte_of_code_point;

  ByteLevelTable() {
    byte_of_code_point.fill(-1);
    int next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const int code_point = printable ? b : next_extra++;
      byte_of_code_point[code_point] = static_cast<int16_t>(b);
      std::string& s = char_of_byte[b];
      if (code_point < 0x80) {
        s.push_back(static_cast<char>(code_point));
      } else {
        s.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
        s.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
      }
    }
  }
};

const ByteLevelTable& table() {
  static const ByteLevelTable instance;
  return instance;
}

}  // namespace

const std::string& byte_level_char(uint8_t byte) { return table().char_of_byte[byte]; }

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_level_char(static_cast<uint8_t>(c));
  return out;
}

std::optional<std::string> from_byte_level(std::string_view text) {
  const auto& t = table();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c0 = static_cast<uint8_t>(text[i]);
    int code_point = -1;
    if (c0 < 0x80) {
      code_point = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < text.size()) {
      code_point = ((c0 & 0x1F) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // Three- and four-byte characters are all outside the alphabet.
    }
    if (code_point >= static_cast<int>(t.byte_of_code_point.size()) || t.byte_of_code_point[code_point] < 0) {
      return std::nullopt;
    }
    out.push_back(static_cast<char>(t.byte_of_code_point[code_point]));
  }
  return out;
}

PreTokenizer::PreTokenizer(std::string pattern) : pattern_(std::move(pattern)) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), PCRE2_UTF | PCRE2_UCP,
                        &error, &error_offset, nullptr);
  if (!code_) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    throw InputError(fmt::format("split regex '{}' does not compile at offset {}: {}", pattern_, error_offset,
                                 reinterpret_cast<const char*>(message.data())));
  }
  // JIT is an optimisation only: without it (no JIT support on this CPU or build) the interpreter runs.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

PreTokenizer::~PreTokenizer() { pcre2_code_free(code_); }

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
  for_each_utf8_run(
      text, [&](std::string_view run) { split_valid(run, match, pieces); },
      [&](std::string_view byte) { pieces.push_back(byte); });
  pcre2_match_data_free(match);
}

template <typename OnMatch>
void PreTokenizer::for_each_match(std::string_view run, pcre2_match_data* match, OnMatch&& on_match) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(run.data());
  size_t offset = 0;
  while (offset < run.size()) {
    // The run was validated by the caller, so PCRE2 need not re-check it on every call (that would be quadratic).
    const int found = pcre2_match(code_, subject, run.size(), offset, PCRE2_NO_UTF_CHECK, match, nullptr);
    if (found < 0) break;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t start = ovector[0];
    const size_t end = ovector[1];
    if (end == start) {  // An empty match splits nothing; step over one character.
      if (start >= run.size()) break;
      offset = start + utf8_sequence_length(run, start);
      continue;
    }
    on_match(start, end);
    offset = end;
  }
}

void PreTokenizer::split_valid(std::string_view run, pcre2_match_data* match,
                               std::vector<std::string_view>& pieces) const {
  size_t gap_start = 0;
  for_each_match(run, match, [&](size_t start, size_t end) {
    if (start > gap_start) pieces.push_back(run.substr(gap_start, start - gap_start));
    pieces.push_back(run.substr(start, end - start));
    gap_start = end;
  });
  if (gap_start < run.size()) pieces.push_back(run.substr(gap_start));
}

std::string PreTokenizer::replace_all(std::string_view text, std::string_view content) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
  std::string out = map_valid_runs(text, [&](std::string_view run) {
    std::string replaced;
    size_t kept_from = 0;
    for_each_match(run, match, [&](size_t start, size_t end) {
      replaced.append(run.substr(kept_from, start - kept_from)).append(content);
      kept_from = end;
    });
    return replaced.append(run.substr(kept_from));
  });
  pcre2_match_data_free(match);
  return out;
}

namespace {

using nlohmann::json;

class RegexSplitStep final : public PreTokenizerStep {
 public:
  explicit RegexSplitStep(std::string pattern) : regex_(std::move(pattern)) {}
  void apply(std::string_view piece, bool, std::vector<std::string_view>& out,
             std::deque<std::string>&) const override {
    regex_.split(piece, out);
  }

 private:
  PreTokenizer regex_;
};

// ByteLevel's add_prefix_space: a piece that does not start with a space gets one.
class PrefixSpaceStep final : public PreTokenizerStep {
 public:
  void apply(std::string_view piece, bool, std::vector<std::string_view>& out,
             std::deque<std::string>& storage) const override {
    if (piece[0] == ' ') {
      out.push_back(piece);
      return;
    }
    storage.push_back(" ");
    out.push_back(storage.back().append(piece));
  }
};

// SentencePiece's whitespace marker: spaces become the replacement (U+2581 "▁"), which is prepended by the scheme
// unless the piece already starts with it ("always": every piece; "first": only the piece that begins the text;
// "never"). With split, a piece starts at each run of replacements, the run kept with the text after it (Hugging
// Face's MergedWithNext: "a▁▁b" -> "a", "▁▁b").
class MetaspaceStep final : public PreTokenizerStep {
 public:
  explicit MetaspaceStep(const json& spec)
      : replacement_(spec.value("replacement", "\xE2\x96\x81")), scheme_(prepend_scheme(spec)),
        split_(json_flag(spec, "split", true)) {
    if (utf8_sequence_length(replacement_, 0) != replacement_.size() || replacement_.empty()) {
      throw InputError(fmt::format("Metaspace replacement '{}' is not one character", replacement_));
    }
  }

  void apply(std::string_view piece, bool at_text_start, std::vector<std::string_view>& out,
             std::deque<std::string>& storage) const override {
    std::string text;
    for (char c : piece) {
      if (c == ' ') {
        text += replacement_;
      } else {
        text.push_back(c);
      }
    }
    const bool prepend = scheme_ == "always" || (scheme_ == "first" && at_text_start);
    if (prepend && text.compare(0, replacement_.size(), replacement_) != 0) text.insert(0, replacement_);
    const std::string& kept = storage.emplace_back(std::move(text));
    if (split_) {
      split_before_replacements(kept, out);
    } else {
      out.push_back(kept);
    }
  }

 private:
  static std::string prepend_scheme(const json& spec) {
    if (!json_flag(spec, "add_prefix_space", true)) return "never";
    const std::string scheme = spec.value("prepend_scheme", "always");
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      throw InputError(fmt::format("Metaspace prepend_scheme '{}' is not always, first or never", scheme));
    }
    return scheme;
  }

  void split_before_replacements(std::string_view text, std::vector<std::string_view>& out) const {
    size_t start = 0;
    bool previous_was_replacement = false;
    for (size_t pos = 0; pos < text.size();) {
      if (text.compare(pos, replacement_.size(), replacement_) == 0) {
        if (!previous_was_replacement && pos > start) {
          out.push_back(text.substr(start, pos - start));
          start = pos;
        }
        previous_was_replacement = true;
        pos += replacement_.size();
      } else {
        previous_was_replacement = false;
        ++pos;
      }
    }
    if (start < text.size()) out.push_back(text.substr(start));
  }

  std::string replacement_;
  std::string scheme_;
  bool split_;
};

}  // namespace

PreTokenizerPipeline::PreTokenizerPipeline(const json& spec) {
  if (!spec.is_null()) add_step(spec);
}

PreTokenizerPipeline::~PreTokenizerPipeline() = default;

void PreTokenizerPipeline::add_step(const json& step) {
  const std::string type = step.value("type", "");
  if (byte_level_) throw InputError(fmt::format("pre-tokenizer {} after ByteLevel is not supported", type));
  if (type == "ByteLevel") {
    byte_level_ = true;
    if (json_flag(step, "add_prefix_space", false)) steps_.push_back(std::make_unique<PrefixSpaceStep>());
    if (json_flag(step, "use_regex", true)) steps_.push_back(std::make_unique<RegexSplitStep>(kGpt2SplitPattern));
  } else if (type == "Split") {
    if (step.value("behavior", "") != "Isolated" || json_flag(step, "invert", false) ||
        !step.at("pattern").contains("Regex")) {
      throw InputError(fmt::format("pre-tokenizer {} is not supported (Split needs a Regex pattern, behavior "
                                   "Isolated, invert false)",
                                   step.dump()));
    }
    steps_.push_back(std::make_unique<RegexSplitStep>(step.at("pattern").at("Regex").get<std::string>()));
  } else if (type == "Metaspace") {
    steps_.push_back(std::make_unique<MetaspaceStep>(step));
  } else if (type == "Sequence") {
    for (const json& inner : step.at("pretokenizers")) add_step(inner);
  } else {
    throw InputError(fmt::format("pre-tokenizer type '{}' is not supported", type));
  }
}

void PreTokenizerPipeline::split(std::string_view segment, bool at_text_start, std::vector<std::string_view>& pieces,
                                 std::deque<std::string>& storage) const {
  if (segment.empty()) return;
  std::vector<std::string_view> current{segment};
  std::vector<std::string_view> next;
  for (const auto& step : steps_) {
    next.clear();
    for (size_t i = 0; i < current.size(); ++i) step->apply(current[i], at_text_start && i == 0, next, storage);
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
}

}  // namespace inkstone
