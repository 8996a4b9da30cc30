// Token shards on disk: the manifest of a prepared data folder, a streaming shard writer, and a memory-mapped
// reader that sees one split's shards as a single stream of tokens.
//
//   DIR/manifest.json     format version, tokenizer fingerprint, vocabulary, dtype, and per split its shards
//                         (file, tokens, documents, xxh64), token, document and source-byte totals; written last
//   DIR/tokenizer.json    the tokenizer, so the folder is self-contained
//   DIR/train_00000.bin   raw little-endian token ids (uint16 or uint32, no header: numpy.memmap reads them);
//   DIR/val_00000.bin     every document ends with eos and never straddles two shards
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "core/atomic_file.h"

namespace inkstone {

inline constexpr int kShardFormatVersion = 1;

enum class TokenDtype { uint16, uint32 };

// uint16 while every id fits (vocab_size <= 65,536), else uint32.
TokenDtype dtype_for_vocab(int64_t vocab_size);
std::string dtype_name(TokenDtype dtype);
int64_t dtype_bytes(TokenDtype dtype);

struct ShardInfo {
  std::string file;  // relative to the data folder
  int64_t tokens = 0;
  int64_t documents = 0;
  std::string xxh64;  // of the file's bytes, 16 lowercase hex digits
};

struct SplitInfo {
  std::vector<ShardInfo> shards;
  int64_t tokens = 0;
  int64_t documents = 0;
  // Bytes of source text the tokens decode to (eos adds none): bits per byte = nats per token / ln 2 * tokens / bytes.
  int64_t text_bytes = 0;
};

struct Manifest {
  int format_version = kShardFormatVersion;
  std::string tokenizer_kind;
  std::string tokenizer_fingerprint;
  int64_t vocab_size = 0;
  int32_t eos = -1;
  int32_t pad = -1;
  TokenDtype dtype = TokenDtype::uint16;
  double val_fraction = 0;
  std::string val_rule;  // the assignment rule in words, so the folder explains itself
  std::map<std::string, SplitInfo> splits;  // "train", "val"
};

std::filesystem::path manifest_path(const std::filesystem::path& data_dir);
nlohmann::json manifest_to_json(const Manifest& manifest);
// `origin` names the file in errors.
Manifest manifest_from_json(const nlohmann::json& document, const std::string& origin);
void write_manifest(const std::filesystem::path& data_dir, const Manifest& manifest);
// InputError naming the file when it is missing, empty, not JSON, of another format version or incomplete.
Manifest read_manifest(const std::filesystem::path& data_dir);

// Writes one split's shards, streaming: memory stays at one write buffer however large the split grows.
// Shard files appear only complete (core/atomic_file.h); finish() returns what the manifest records.
class ShardWriter {
 public:
  ShardWriter(std::filesystem::path data_dir, std::string split, TokenDtype dtype, int64_t vocab_size,
              int64_t max_shard_tokens);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends ids of the current document, which stand for `text_bytes` bytes of source text.
  // An id outside [0, vocab_size) is an InputError.
  void append(const std::vector<int32_t>& ids, int64_t text_bytes);
  // Closes the current document; the shard is closed once it holds max_shard_tokens or more.
  void end_document();
  SplitInfo finish();

 private:
  void close_shard();
  void flush_buffer();

  std::filesystem::path data_dir_;
  std::string split_;
  TokenDtype dtype_;
  int64_t vocab_size_;
  int64_t max_shard_tokens_;
  std::unique_ptr<AtomicFile> file_;
  XXH64_state_t* hash_ = nullptr;
  std::vector<char> buffer_;
  ShardInfo shard_;
  SplitInfo split_info_;
};

// A read-only memory mapping of a whole file.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile& operator=(MappedFile&&) = delete;

  const unsigned char* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  int64_t size_ = 0;
};

// The shards of one split, memory-mapped, read as one stream of token ids.
class SplitTokens {
 public:
  // Checks every shard exists, is non-empty and has the manifest's size; with `verify` also its xxh64 and that
  // every id is below the vocabulary (one pass over the data; skip it for huge folders). InputError names the file.
  SplitTokens(const std::filesystem::path& data_dir, const Manifest& manifest, const std::string& split,
              bool verify);

  int64_t size() const { return size_; }
  // Copies tokens [offset, offset + count) into `out`, across shard boundaries.
  void read(int64_t offset, int64_t count, int32_t* out) const;
  // Offset of every document's first token, in order, then size(): documents are the runs ending in eos.
  std::vector<int64_t> document_starts(int32_t eos) const;

 private:
  struct Shard {
    MappedFile map;
    int64_t begin = 0;  // offset of its first token in the stream
    int64_t tokens = 0;
  };

  TokenDtype dtype_;
  std::vector<Shard> shards_;
  int64_t size_ = 0;
};

}  // namespace inkstone
