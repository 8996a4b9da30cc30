#include "dataset/shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/json_error.h"
#include "core/input_file.h"

// Shards hold little-endian ids and are read by memcpy; a big-endian host would need byte swaps everywhere.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token shards assume a little-endian host");

namespace inkstone {
namespace {

constexpr const char* kFormatName = "inkstone-token-shards";
constexpr size_t kWriteBufferBytes = size_t{4} << 20;

std::string hex64(uint64_t value) { return fmt::format("{:016x}", value); }

template <typename Word>
void append_word(std::vector<char>& buffer, int32_t id) {
  const auto word = static_cast<Word>(id);
  const char* bytes = reinterpret_cast<const char*>(&word);
  buffer.insert(buffer.end(), bytes, bytes + sizeof(Word));
}

TokenDtype dtype_from_name(const std::string& name, const std::string& origin) {
  if (name == "uint16") return TokenDtype::uint16;
  if (name == "uint32") return TokenDtype::uint32;
  throw InputError(fmt::format("{}: unknown dtype '{}' (expected uint16 or uint32)", origin, name));
}

nlohmann::json split_to_json(const SplitInfo& split, bool loss_mask) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& shard : split.shards) {
    shards.push_back({{"file", shard.file}, {"tokens", shard.tokens}, {"documents", shard.documents},
                      {"xxh64", shard.xxh64}});
    if (loss_mask) shards.back().update({{"mask_file", shard.mask_file}, {"mask_xxh64", shard.mask_xxh64}});
  }
  nlohmann::json out = {{"tokens", split.tokens}, {"documents", split.documents}, {"text_bytes", split.text_bytes},
                        {"shards", shards}};
  if (loss_mask) out.update({{"trained_tokens", split.trained_tokens}, {"trained_bytes", split.trained_bytes}});
  return out;
}

int64_t non_negative(const nlohmann::json& document, const char* key, const std::string& where) {
  const auto value = document.at(key).get<int64_t>();
  if (value < 0) throw InputError(fmt::format("{}: {} = {} is negative", where, key, value));
  return value;
}

// Shards are plain file names inside the data folder: a path elsewhere would read (or checksum) a foreign file.
std::string shard_file_name(const nlohmann::json& entry, const char* key, const std::string& where) {
  auto file = entry.at(key).get<std::string>();
  if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
    throw InputError(fmt::format("{}: shard file '{}' is not a file name inside the data folder", where, file));
  return file;
}

SplitInfo split_from_json(const nlohmann::json& document, bool loss_mask, const std::string& where) {
  SplitInfo split;
  split.tokens = non_negative(document, "tokens", where);
  split.documents = non_negative(document, "documents", where);
  split.text_bytes = non_negative(document, "text_bytes", where);
  split.trained_tokens = loss_mask ? non_negative(document, "trained_tokens", where) : split.tokens;
  split.trained_bytes = loss_mask ? non_negative(document, "trained_bytes", where) : split.text_bytes;
  if (split.trained_tokens > split.tokens)
    throw InputError(fmt::format("{}: trained_tokens = {} exceeds its {} tokens", where, split.trained_tokens,
                                 split.tokens));
  if (split.trained_bytes > split.text_bytes)
    throw InputError(fmt::format("{}: trained_bytes = {} exceeds its {} text bytes", where, split.trained_bytes,
                                 split.text_bytes));
  for (const auto& entry : document.at("shards")) {
    split.shards.push_back({shard_file_name(entry, "file", where), non_negative(entry, "tokens", where),
                            non_negative(entry, "documents", where), entry.at("xxh64").get<std::string>()});
    if (loss_mask) {
      split.shards.back().mask_file = shard_file_name(entry, "mask_file", where);
      split.shards.back().mask_xxh64 = entry.at("mask_xxh64").get<std::string>();
    }
  }
  return split;
}

}  // namespace

TokenDtype dtype_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? TokenDtype::uint16 : TokenDtype::uint32;
}

std::string dtype_name(TokenDtype dtype) { return dtype == TokenDtype::uint16 ? "uint16" : "uint32"; }

int64_t dtype_bytes(TokenDtype dtype) { return dtype == TokenDtype::uint16 ? 2 : 4; }

std::filesystem::path manifest_path(const std::filesystem::path& data_dir) { return data_dir / "manifest.json"; }

nlohmann::json manifest_to_json(const Manifest& manifest) {
  nlohmann::json splits = nlohmann::json::object();
  for (const auto& [name, split] : manifest.splits) splits[name] = split_to_json(split, manifest.loss_mask);
  nlohmann::json document = {{"format", kFormatName},
          {"format_version", manifest.loss_mask ? kMaskedShardFormatVersion : kShardFormatVersion},
          {"tokenizer",
           {{"kind", manifest.tokenizer_kind},
            {"fingerprint", manifest.tokenizer_fingerprint},
            {"file", "tokenizer.json"},
            {"vocab_size", manifest.vocab_size},
            {"eos", manifest.eos},
            {"pad", manifest.pad}}},
          {"dtype", dtype_name(manifest.dtype)},
          {"byte_order", "little"},
          {"validation", {{"fraction", manifest.val_fraction}, {"rule", manifest.val_rule}}},
          {"splits", splits}};
  if (manifest.loss_mask) document["loss_mask"] = true;
  if (manifest.chat)
    document["chat"] = {{"format", manifest.chat->format},
                        {"system", manifest.chat->system},
                        {"prompt_start", manifest.chat->prompt_start},
                        {"multi_response_conversations", manifest.chat->multi_response_conversations}};
  return document;
}

Manifest manifest_from_json(const nlohmann::json& document, const std::string& origin) {
  try {
    if (document.at("format").get<std::string>() != kFormatName) {
      throw InputError(fmt::format("{}: not an inkstone token-shard manifest", origin));
    }
    Manifest manifest;
    const int version = document.at("format_version").get<int>();
    if (version != kShardFormatVersion && version != kMaskedShardFormatVersion) {
      throw InputError(fmt::format("{}: format version {} but this build reads {} and {}; prepare the data again",
                                   origin, version, kShardFormatVersion, kMaskedShardFormatVersion));
    }
    const auto& tokenizer = document.at("tokenizer");
    manifest.tokenizer_kind = tokenizer.at("kind").get<std::string>();
    manifest.tokenizer_fingerprint = tokenizer.at("fingerprint").get<std::string>();
    manifest.vocab_size = tokenizer.at("vocab_size").get<int64_t>();
    manifest.eos = tokenizer.at("eos").get<int32_t>();
    manifest.pad = tokenizer.at("pad").get<int32_t>();
    if (manifest.vocab_size < 1)
      throw InputError(fmt::format("{}: tokenizer.vocab_size = {} must be positive", origin, manifest.vocab_size));
    if (manifest.eos < 0 || manifest.eos >= manifest.vocab_size || manifest.pad < -1 ||
        manifest.pad >= manifest.vocab_size)
      throw InputError(fmt::format("{}: eos {} / pad {} outside the vocabulary of {} ids", origin, manifest.eos,
                                   manifest.pad, manifest.vocab_size));
    if (const auto order = document.at("byte_order").get<std::string>(); order != "little")
      throw InputError(fmt::format("{}: byte_order '{}' is not supported (shards are little-endian)", origin, order));
    manifest.dtype = dtype_from_name(document.at("dtype").get<std::string>(), origin);
    if (manifest.dtype == TokenDtype::uint16 && manifest.vocab_size > 65536)
      throw InputError(fmt::format("{}: dtype uint16 cannot hold a vocabulary of {} ids", origin, manifest.vocab_size));
    manifest.val_fraction = document.at("validation").at("fraction").get<double>();
    manifest.val_rule = document.at("validation").at("rule").get<std::string>();
    manifest.loss_mask = document.value("loss_mask", false);
    if (manifest.loss_mask != (version == kMaskedShardFormatVersion))
      throw InputError(fmt::format("{}: format version {} {} loss masks; prepare the data again", origin, version,
                                   manifest.loss_mask ? "does not carry" : "needs"));
    if (const auto chat = document.find("chat"); chat != document.end())
      manifest.chat = ChatRecord{chat->at("format").get<std::string>(), chat->at("system").get<std::string>(),
                                 chat->at("prompt_start").get<std::string>(),
                                 non_negative(*chat, "multi_response_conversations", origin + " chat")};
    for (const auto& [name, split] : document.at("splits").items())
      manifest.splits[name] = split_from_json(split, manifest.loss_mask, fmt::format("{} split '{}'", origin, name));
    return manifest;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: {}", origin, describe_json_error(e)));
  }
}

void write_manifest(const std::filesystem::path& data_dir, const Manifest& manifest) {
  write_file_atomic(manifest_path(data_dir), manifest_to_json(manifest).dump(2) + "\n");
}

Manifest read_manifest(const std::filesystem::path& data_dir) {
  const auto path = manifest_path(data_dir);
  if (!std::filesystem::exists(path)) {
    throw InputError(fmt::format("{}: missing; make the data folder with `inkstone data prepare`", path.string()));
  }
  const std::string text = read_input_file(path, "manifest");
  if (text.empty()) throw InputError(fmt::format("{}: empty file", path.string()));
  nlohmann::json document = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) throw InputError(fmt::format("{}: not valid JSON", path.string()));
  return manifest_from_json(document, path.string());
}

ShardWriter::ShardWriter(std::filesystem::path data_dir, std::string split, TokenDtype dtype, int64_t vocab_size,
                         int64_t max_shard_tokens, bool loss_mask)
    : data_dir_(std::move(data_dir)),
      split_(std::move(split)),
      dtype_(dtype),
      vocab_size_(vocab_size),
      max_shard_tokens_(max_shard_tokens),
      loss_mask_(loss_mask),
      hash_(XXH64_createState()),
      mask_hash_(XXH64_createState()) {
  buffer_.reserve(kWriteBufferBytes);
}

ShardWriter::~ShardWriter() {
  XXH64_freeState(hash_);
  XXH64_freeState(mask_hash_);
}

void ShardWriter::append(const std::vector<int32_t>& ids, int64_t text_bytes, const std::vector<uint8_t>& trained,
                         int64_t trained_bytes) {
  if (loss_mask_ != !trained.empty() || (loss_mask_ && trained.size() != ids.size()))
    throw std::invalid_argument("ShardWriter::append: one mask value per id exactly when the folder has loss masks");
  if (!file_) {
    const std::string stem = fmt::format("{}_{:05d}", split_, split_info_.shards.size());
    shard_ = ShardInfo{stem + ".bin", 0, 0, "", loss_mask_ ? stem + ".mask" : "", ""};
    file_ = std::make_unique<AtomicFile>(data_dir_ / shard_.file);
    XXH64_reset(hash_, 0);
    if (loss_mask_) {
      mask_ = std::make_unique<AtomicFile>(data_dir_ / shard_.mask_file);
      XXH64_reset(mask_hash_, 0);
    }
  }
  for (uint8_t value : trained) {
    mask_buffer_.push_back(static_cast<char>(value != 0));
    split_info_.trained_tokens += value != 0;
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      throw InputError(fmt::format("token id {} is outside the vocabulary of {} ids", id, vocab_size_));
    }
    if (dtype_ == TokenDtype::uint16) {
      append_word<uint16_t>(buffer_, id);
    } else {
      append_word<uint32_t>(buffer_, id);
    }
    if (buffer_.size() >= kWriteBufferBytes) flush_buffer();
  }
  if (mask_buffer_.size() >= kWriteBufferBytes) flush_buffer();
  shard_.tokens += static_cast<int64_t>(ids.size());
  split_info_.tokens += static_cast<int64_t>(ids.size());
  if (!loss_mask_) split_info_.trained_tokens += static_cast<int64_t>(ids.size());
  split_info_.text_bytes += text_bytes;
  split_info_.trained_bytes += loss_mask_ ? trained_bytes : text_bytes;
}

void ShardWriter::end_document() {
  ++shard_.documents;
  ++split_info_.documents;
  if (shard_.tokens >= max_shard_tokens_) close_shard();
}

void ShardWriter::flush_buffer() {
  file_->write(buffer_.data(), buffer_.size());
  XXH64_update(hash_, buffer_.data(), buffer_.size());
  buffer_.clear();
  if (!mask_) return;
  mask_->write(mask_buffer_.data(), mask_buffer_.size());
  XXH64_update(mask_hash_, mask_buffer_.data(), mask_buffer_.size());
  mask_buffer_.clear();
}

void ShardWriter::close_shard() {
  if (!file_) return;
  flush_buffer();
  file_->commit();
  file_.reset();
  shard_.xxh64 = hex64(XXH64_digest(hash_));
  if (mask_) {
    mask_->commit();
    mask_.reset();
    shard_.mask_xxh64 = hex64(XXH64_digest(mask_hash_));
  }
  split_info_.shards.push_back(shard_);
}

SplitInfo ShardWriter::finish() {
  close_shard();
  return split_info_;
}

MappedFile::MappedFile(const std::filesystem::path& path) {
  require_regular_file(path, "shard");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(fmt::format("{}: cannot open ({})", path.string(), std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || info.st_size == 0) {
    ::close(fd);
    throw InputError(fmt::format("{}: empty file", path.string()));
  }
  void* mapped = ::mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file open
  if (mapped == MAP_FAILED) {
    throw InputError(fmt::format("{}: cannot memory-map ({})", path.string(), std::strerror(errno)));
  }
  data_ = static_cast<const unsigned char*>(mapped);
  size_ = info.st_size;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), static_cast<size_t>(size_));
}

MappedFile::MappedFile(MappedFile&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

namespace {

template <typename Word>
void check_ids(const unsigned char* data, int64_t tokens, int64_t vocab_size, const std::filesystem::path& path) {
  for (int64_t i = 0; i < tokens; ++i) {
    Word id;
    std::memcpy(&id, data + i * static_cast<int64_t>(sizeof(Word)), sizeof(Word));
    if (static_cast<int64_t>(id) >= vocab_size) {
      throw InputError(fmt::format("{}: token id {} at position {} is outside the vocabulary of {} ids",
                                   path.string(), id, i, vocab_size));
    }
  }
}

template <typename Word>
void copy_ids(const unsigned char* data, int64_t first, int64_t count, int32_t* out) {
  const Word* words = reinterpret_cast<const Word*>(data) + first;
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(words[i]);
}

// A shard's loss mask: one byte per token, each 0 or 1 (checked with `verify`).
MappedFile open_loss_mask(const std::filesystem::path& path, const ShardInfo& info, bool verify) {
  MappedFile map(path);
  if (map.size() != info.tokens)
    throw InputError(fmt::format("{}: {} bytes but its shard holds {} tokens (one mask byte each)", path.string(),
                                 map.size(), info.tokens));
  if (verify) {
    const std::string checksum = hex64(XXH64(map.data(), static_cast<size_t>(map.size()), 0));
    if (checksum != info.mask_xxh64)
      throw InputError(fmt::format("{}: checksum mismatch (xxh64 {} but the manifest says {}); the file is corrupt",
                                   path.string(), checksum, info.mask_xxh64));
    const auto* end = map.data() + map.size();
    if (const auto* bad = std::find_if(map.data(), end, [](unsigned char b) { return b > 1; }); bad != end)
      throw InputError(fmt::format("{}: byte {} at position {} is not a loss mask value (0 or 1)", path.string(),
                                   static_cast<int>(*bad), bad - map.data()));
  }
  return map;
}

}  // namespace

SplitTokens::SplitTokens(const std::filesystem::path& data_dir, const Manifest& manifest, const std::string& split,
                         bool verify)
    : dtype_(manifest.dtype), loss_mask_(manifest.loss_mask) {
  auto found = manifest.splits.find(split);
  if (found == manifest.splits.end()) {
    throw InputError(fmt::format("{}: no split '{}'", manifest_path(data_dir).string(), split));
  }
  for (const auto& info : found->second.shards) {
    const auto path = data_dir / info.file;
    MappedFile map(path);
    if (map.size() != info.tokens * dtype_bytes(dtype_)) {
      throw InputError(fmt::format("{}: {} bytes but the manifest says {} tokens of {}", path.string(), map.size(),
                                   info.tokens, dtype_name(dtype_)));
    }
    if (verify) {
      const std::string checksum = hex64(XXH64(map.data(), static_cast<size_t>(map.size()), 0));
      if (checksum != info.xxh64) {
        throw InputError(fmt::format("{}: checksum mismatch (xxh64 {} but the manifest says {}); the file is corrupt",
                                     path.string(), checksum, info.xxh64));
      }
      if (dtype_ == TokenDtype::uint16) {
        check_ids<uint16_t>(map.data(), info.tokens, manifest.vocab_size, path);
      } else {
        check_ids<uint32_t>(map.data(), info.tokens, manifest.vocab_size, path);
      }
    }
    shards_.push_back({std::move(map), size_, info.tokens, std::nullopt});
    if (loss_mask_) shards_.back().mask.emplace(open_loss_mask(data_dir / info.mask_file, info, verify));
    size_ += info.tokens;
  }
}

template <typename CopyRun>
void SplitTokens::for_each_run(int64_t offset, int64_t count, CopyRun&& copy) const {
  if (offset < 0 || count < 0 || offset + count > size_) {
    throw std::out_of_range(fmt::format("tokens [{}, {}) outside a split of {}", offset, offset + count, size_));
  }
  // The last shard that begins at or before `offset`.
  auto shard = std::upper_bound(shards_.begin(), shards_.end(), offset,
                                [](int64_t value, const Shard& s) { return value < s.begin; }) - 1;
  for (int64_t done = 0; done < count; ++shard) {
    const int64_t first = offset + done - shard->begin;
    const int64_t n = std::min(count - done, shard->tokens - first);
    copy(*shard, first, n, done);
    done += n;
  }
}

void SplitTokens::read(int64_t offset, int64_t count, int32_t* out) const {
  for_each_run(offset, count, [&](const Shard& shard, int64_t first, int64_t n, int64_t done) {
    if (dtype_ == TokenDtype::uint16) {
      copy_ids<uint16_t>(shard.map.data(), first, n, out + done);
    } else {
      copy_ids<uint32_t>(shard.map.data(), first, n, out + done);
    }
  });
}

void SplitTokens::read_loss_mask(int64_t offset, int64_t count, uint8_t* out) const {
  if (!loss_mask_) throw std::logic_error("read_loss_mask: this split has no loss mask");
  for_each_run(offset, count, [&](const Shard& shard, int64_t first, int64_t n, int64_t done) {
    std::memcpy(out + done, shard.mask->data() + first, static_cast<size_t>(n));
  });
}

std::vector<int64_t> SplitTokens::document_starts(int32_t eos) const {
  constexpr int64_t kBlock = int64_t{1} << 20;  // tokens decoded at a time, so the scan needs little memory
  std::vector<int64_t> starts;
  std::vector<int32_t> block(static_cast<size_t>(std::min(kBlock, size_)));
  bool at_start = true;
  for (int64_t begin = 0; begin < size_; begin += kBlock) {
    const int64_t n = std::min(kBlock, size_ - begin);
    read(begin, n, block.data());
    for (int64_t i = 0; i < n; ++i) {
      if (at_start) starts.push_back(begin + i);
      at_start = block[static_cast<size_t>(i)] == eos;
    }
  }
  starts.push_back(size_);
  return starts;
}

}  // namespace inkstone
