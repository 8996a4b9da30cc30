#include "dataset/normalizer.h"

#include <cstdlib>

#include <fmt/format.h>
#include <utf8proc.h>

#include "core/errors.h"
#include "core/utf8.h"

namespace inkstone {
namespace {

using nlohmann::json;

bool is_ascii(char c) { return static_cast<uint8_t>(c) < 0x80; }

// transform(stretch) over the stretches of a valid run that hold non-ASCII characters, the rest copied. ASCII is
// stable under every normalization form and never composes with the character before it, so a stretch can end
// before any ASCII character that is followed by ASCII (or ends the run); it starts one character early, since a
// combining mark may compose with the ASCII letter before it.
template <typename Transform>
std::string map_non_ascii_stretches(std::string_view run, Transform&& transform) {
  std::string out;
  out.reserve(run.size());
  size_t copied = 0;
  for (size_t pos = 0; pos < run.size();) {
    if (is_ascii(run[pos])) {
      ++pos;
      continue;
    }
    const size_t start = pos > copied ? pos - 1 : pos;
    size_t end = pos;
    while (end < run.size() && !(is_ascii(run[end]) && (end + 1 == run.size() || is_ascii(run[end + 1])))) ++end;
    out.append(run.substr(copied, start - copied)).append(transform(run.substr(start, end - start)));
    copied = pos = end;
  }
  return out.append(run.substr(copied));
}

// NFC, NFD, NFKC or NFKD of each valid run, by utf8proc's composition options.
class UnicodeFormStep final : public NormalizerStep {
 public:
  explicit UnicodeFormStep(int options) : options_(static_cast<utf8proc_option_t>(UTF8PROC_STABLE | options)) {}

  std::string apply(std::string_view text) const override {
    return map_valid_runs(text, [&](std::string_view run) {
      return map_non_ascii_stretches(run, [&](std::string_view stretch) { return normalized(stretch); });
    });
  }

 private:
  std::string normalized(std::string_view text) const {
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t length = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                                 static_cast<utf8proc_ssize_t>(text.size()), &mapped, options_);
    if (length < 0) return std::string(text);  // Cannot happen for valid UTF-8 without UTF8PROC_REJECTNA.
    std::string out(reinterpret_cast<const char*>(mapped), static_cast<size_t>(length));
    std::free(mapped);
    return out;
  }

  utf8proc_option_t options_;
};

// Each code point by its full lowercase mapping, with no context, as Rust's char::to_lowercase (so a final
// capital sigma becomes σ, not ς). utf8proc holds the simple mappings, which differ from the full ones only for
// U+0130 (İ -> "i" + U+0307).
class LowercaseStep final : public NormalizerStep {
 public:
  std::string apply(std::string_view text) const override {
    return map_valid_runs(text, [](std::string_view run) {
      std::string out;
      out.reserve(run.size());
      for (size_t pos = 0; pos < run.size();) {
        const size_t length = utf8_sequence_length(run, pos);
        const char32_t code_point = utf8_code_point(run, pos, length);
        if (code_point == 0x130) {
          out += "i\xCC\x87";
        } else {
          append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(code_point))));
        }
        pos += length;
      }
      return out;
    });
  }
};

class ReplaceStep final : public NormalizerStep {
 public:
  explicit ReplaceStep(const json& spec) : replace_(spec) {}
  std::string apply(std::string_view text) const override { return replace_.apply(text); }

 private:
  TextReplace replace_;
};

// Prepends its text to a non-empty segment (each segment between added tokens gets it once).
class PrependStep final : public NormalizerStep {
 public:
  explicit PrependStep(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string apply(std::string_view text) const override {
    return text.empty() ? std::string() : prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

// Removes leading and / or trailing Unicode whitespace.
class StripStep final : public NormalizerStep {
 public:
  StripStep(bool left, bool right) : left_(left), right_(right) {}

  std::string apply(std::string_view text) const override {
    size_t begin = 0;
    size_t end = text.size();
    if (left_) {
      while (begin < end) {
        const size_t length = utf8_sequence_length(text, begin);
        if (length == 0 || !is_unicode_whitespace(utf8_code_point(text, begin, length))) break;
        begin += length;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
        const size_t length = utf8_sequence_length(text, start);
        if (length != end - start || !is_unicode_whitespace(utf8_code_point(text, start, length))) break;
        end = start;
      }
    }
    return std::string(text.substr(begin, end - begin));
  }

 private:
  bool left_, right_;
};

}  // namespace

TextReplace::TextReplace(const json& spec) : content_(spec.at("content").get<std::string>()) {
  const json& pattern = spec.at("pattern");
  if (pattern.contains("String")) {
    literal_ = pattern.at("String").get<std::string>();
  } else if (pattern.contains("Regex")) {
    regex_ = std::make_unique<PreTokenizer>(pattern.at("Regex").get<std::string>());
  } else {
    throw InputError(fmt::format("Replace pattern {} is neither String nor Regex", pattern.dump()));
  }
}

std::string TextReplace::apply(std::string_view text) const {
  if (regex_) return regex_->replace_all(text, content_);
  if (literal_.empty()) return std::string(text);
  // A valid UTF-8 literal found bytewise always starts on a character: its first byte is never a continuation.
  std::string out;
  out.reserve(text.size());
  size_t kept_from = 0;
  for (size_t found = text.find(literal_); found != std::string_view::npos; found = text.find(literal_, kept_from)) {
    out.append(text.substr(kept_from, found - kept_from)).append(content_);
    kept_from = found + literal_.size();
  }
  return out.append(text.substr(kept_from));
}

Normalizer::Normalizer(const json& spec) {
  if (!spec.is_null()) add_step(spec);
}

Normalizer::~Normalizer() = default;
Normalizer::Normalizer(Normalizer&&) noexcept = default;
Normalizer& Normalizer::operator=(Normalizer&&) noexcept = default;

void Normalizer::add_step(const json& step) {
  const std::string type = step.value("type", "");
  if (type == "Sequence") {
    for (const json& inner : step.at("normalizers")) add_step(inner);
  } else if (type == "NFC") {
    steps_.push_back(std::make_unique<UnicodeFormStep>(UTF8PROC_COMPOSE));
  } else if (type == "NFD") {
    steps_.push_back(std::make_unique<UnicodeFormStep>(UTF8PROC_DECOMPOSE));
  } else if (type == "NFKC") {
    steps_.push_back(std::make_unique<UnicodeFormStep>(UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  } else if (type == "NFKD") {
    steps_.push_back(std::make_unique<UnicodeFormStep>(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  } else if (type == "Lowercase") {
    steps_.push_back(std::make_unique<LowercaseStep>());
  } else if (type == "Replace") {
    steps_.push_back(std::make_unique<ReplaceStep>(step));
  } else if (type == "Prepend") {
    steps_.push_back(std::make_unique<PrependStep>(step.at("prepend").get<std::string>()));
  } else if (type == "Strip") {
    steps_.push_back(std::make_unique<StripStep>(step.value("strip_left", true), step.value("strip_right", true)));
  } else {
    throw InputError(fmt::format("normalizer type '{}' is not supported", type));
  }
}

std::string Normalizer::normalize(std::string_view text) const {
  std::string out(text);
  for (const auto& step : steps_) out = step->apply(out);
  return out;
}

}  // namespace inkstone
