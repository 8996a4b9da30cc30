#include "dataset/tokenizer_decoder.h"

#include <optional>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/utf8.h"
#include "dataset/normalizer.h"
#include "dataset/pretokenizer.h"

namespace inkstone {
namespace {

using nlohmann::json;

std::string joined(const std::vector<std::string>& tokens, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += separator;
    out += tokens[i];
  }
  return out;
}

bool is_valid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = utf8_sequence_length(text, pos);
    if (length == 0) return false;
    pos += length;
  }
  return true;
}

class ByteLevelStep final : public DecoderStep {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      std::optional<std::string> decoded = from_byte_level(token);
      bytes += decoded ? *decoded : token;
    }
    tokens.assign(1, std::move(bytes));
  }
};

class MetaspaceDecoder final : public DecoderStep {
 public:
  explicit MetaspaceDecoder(const json& spec)
      : replacement_(spec.value("replacement", "\xE2\x96\x81")), drops_in_first_(prepend_scheme(spec) != "never") {}

  void apply(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      const std::string_view space = i == 0 && drops_in_first_ ? "" : " ";
      for (size_t found = token.find(replacement_); found != std::string::npos;
           found = token.find(replacement_, found + space.size())) {
        token.replace(found, replacement_.size(), space);
      }
    }
  }

 private:
  // Older files say add_prefix_space instead; false means "never".
  static std::string prepend_scheme(const json& spec) {
    auto prefix = spec.find("add_prefix_space");
    if (prefix != spec.end() && prefix->is_boolean() && !prefix->get<bool>()) return "never";
    return spec.value("prepend_scheme", "always");
  }

  std::string replacement_;
  bool drops_in_first_;
};

class ReplaceDecoder final : public DecoderStep {
 public:
  explicit ReplaceDecoder(const json& spec) : replace_(spec) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = replace_.apply(token);
  }

 private:
  TextReplace replace_;
};

// Tokens spelled <0xAB> (as SentencePiece's byte fallback writes them) become that byte; a run of them is kept
// when it is valid UTF-8, else each of its tokens becomes U+FFFD.
class ByteFallbackStep final : public DecoderStep {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string run;
    size_t run_tokens = 0;
    auto flush = [&] {
      if (run_tokens == 0) return;
      if (is_valid_utf8(run)) {
        out.push_back(run);
      } else {
        out.insert(out.end(), run_tokens, "\xEF\xBF\xBD");
      }
      run.clear();
      run_tokens = 0;
    };
    for (std::string& token : tokens) {
      if (const int byte = byte_fallback_value(token); byte >= 0) {
        run.push_back(static_cast<char>(byte));
        ++run_tokens;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens.swap(out);
  }

};

class FuseStep final : public DecoderStep {
 public:
  void apply(std::vector<std::string>& tokens) const override { tokens.assign(1, joined(tokens, "")); }
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder final : public DecoderStep {
 public:
  explicit StripDecoder(const json& spec)
      : content_(spec.at("content").get<std::string>()),
        start_(spec.value("start", size_t{0})),
        stop_(spec.value("stop", size_t{0})) {
    if (content_.empty()) throw InputError("decoder Strip has an empty content");
  }

  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      size_t begin = 0;
      for (size_t k = 0; k < start_ && token.compare(begin, content_.size(), content_) == 0; ++k) {
        begin += content_.size();
      }
      size_t end = token.size();
      for (size_t k = 0; k < stop_ && end >= begin + content_.size() &&
                         token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++k) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

}  // namespace

int byte_fallback_value(std::string_view token) {
  auto hex_digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  const int high = hex_digit(token[3]), low = hex_digit(token[4]);
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

TokenizerDecoder::TokenizerDecoder(const json& spec) {
  if (spec.is_null()) {
    join_with_spaces_ = true;
    return;
  }
  add_step(spec);
}

TokenizerDecoder::~TokenizerDecoder() = default;
TokenizerDecoder::TokenizerDecoder(TokenizerDecoder&&) noexcept = default;
TokenizerDecoder& TokenizerDecoder::operator=(TokenizerDecoder&&) noexcept = default;

void TokenizerDecoder::add_step(const json& step) {
  const std::string type = step.value("type", "");
  if (type == "Sequence") {
    for (const json& inner : step.at("decoders")) add_step(inner);
  } else if (type == "ByteLevel") {
    steps_.push_back(std::make_unique<ByteLevelStep>());
  } else if (type == "Metaspace") {
    steps_.push_back(std::make_unique<MetaspaceDecoder>(step));
  } else if (type == "Replace") {
    steps_.push_back(std::make_unique<ReplaceDecoder>(step));
  } else if (type == "ByteFallback") {
    steps_.push_back(std::make_unique<ByteFallbackStep>());
  } else if (type == "Fuse") {
    steps_.push_back(std::make_unique<FuseStep>());
  } else if (type == "Strip") {
    steps_.push_back(std::make_unique<StripDecoder>(step));
  } else {
    throw InputError(fmt::format("decoder type '{}' is not supported", type));
  }
}

std::string TokenizerDecoder::decode(std::vector<std::string> tokens) const {
  for (const auto& step : steps_) step->apply(tokens);
  return joined(tokens, join_with_spaces_ ? " " : "");
}

}  // namespace inkstone
