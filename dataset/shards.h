// Token shards on disk: the manifest of a prepared data folder, a streaming shard writer, and a memory-mapped
// reader that sees one split's shards as a single stream of tokens.
//
//   DIR/manifest.json     format version, tokenizer fingerprint, vocabulary, dtype, and per split its shards
//                         (file, tokens, documents, xxh64), token, document and source-byte totals; written last
//   DIR/tokenizer.json    the tokenizer, so the folder is self-contained
//   DIR/train_00000.bin   raw little-endian token ids (uint16 or uint32, no header: numpy.memmap reads them);
//   DIR/val_00000.bin     every document ends with eos and never straddles two shards
//   DIR/train_00000.mask  only in folders of conversations (`data prepare --format chat`): one byte per token of
//                         the shard beside it, 1 where the loss trains on the token (a response), 0 elsewhere
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "core/atomic_file.h"

namespace inkstone {

// Version 2 is a folder with loss masks beside its shards (conversations): a reader of version 1 would train on
// every token of it, so it must refuse the folder rather than ignore the masks.
inline constexpr int kShardFormatVersion = 1;
inline constexpr int kMaskedShardFormatVersion = 2;

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
  std::string mask_file;   // the loss mask beside it; empty in a folder without loss masks
  std::string mask_xxh64;
};

struct SplitInfo {
  std::vector<ShardInfo> shards;
  int64_t tokens = 0;
  int64_t documents = 0;
  // Bytes of source text the tokens decode to (eos adds none): bits per byte = nats per token / ln 2 * tokens / bytes.
  int64_t text_bytes = 0;
  int64_t trained_tokens = 0;  // tokens the loss mask trains on; equals `tokens` in a folder without loss masks
  // Bytes of source text the trained tokens decode to; equals `text_bytes` in a folder without loss masks.
  int64_t trained_bytes = 0;
};

// How the conversations of a folder of chat data were rendered (dataset/prompt_format.h): a run that trains on
// them must render its prompts the same way.
struct ChatRecord {
  std::string format;  // chat.format's value
  std::string system;
  std::string prompt_start;
  // Conversations trained on more than one response: a diffusion objective would see a later turn beside a noised
  // earlier response (`data prepare --split-turns` writes none).
  int64_t multi_response_conversations = 0;
};

struct Manifest {
  std::string tokenizer_kind;
  std::string tokenizer_fingerprint;
  int64_t vocab_size = 0;
  int32_t eos = -1;
  int32_t pad = -1;
  TokenDtype dtype = TokenDtype::uint16;
  double val_fraction = 0;
  std::string val_rule;  // the assignment rule in words, so the folder explains itself
  std::map<std::string, SplitInfo> splits;  // "train", "val"
  bool loss_mask = false;          // every shard has a loss mask beside it
  std::optional<ChatRecord> chat;  // set for conversations (`data prepare --format chat`)
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
  // With `loss_mask`, every shard gets its mask file and append() takes each token's mask.
  ShardWriter(std::filesystem::path data_dir, std::string split, TokenDtype dtype, int64_t vocab_size,
              int64_t max_shard_tokens, bool loss_mask = false);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends ids of the current document, which stand for `text_bytes` bytes of source text, and with a loss mask
  // their mask (one 0 / 1 per id) and the bytes of the trained ones. An id outside [0, vocab_size) is an InputError.
  void append(const std::vector<int32_t>& ids, int64_t text_bytes, const std::vector<uint8_t>& trained = {},
              int64_t trained_bytes = 0);
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
  bool loss_mask_;
  std::unique_ptr<AtomicFile> file_, mask_;
  XXH64_state_t* hash_ = nullptr;
  XXH64_state_t* mask_hash_ = nullptr;
  std::vector<char> buffer_, mask_buffer_;
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
  bool has_loss_mask() const { return loss_mask_; }
  // The loss mask of tokens [offset, offset + count) (has_loss_mask() only).
  void read_loss_mask(int64_t offset, int64_t count, uint8_t* out) const;
  // Offset of every document's first token, in order, then size(): documents are the runs ending in eos.
  std::vector<int64_t> document_starts(int32_t eos) const;

 private:
  struct Shard {
    MappedFile map;
    int64_t begin = 0;  // offset of its first token in the stream
    int64_t tokens = 0;
    std::optional<MappedFile> mask;
  };
  // The shard holding token `offset` and the offset within it, for every run of a read.
  template <typename CopyRun>
  void for_each_run(int64_t offset, int64_t count, CopyRun&& copy) const;

  TokenDtype dtype_;
  bool loss_mask_ = false;
  std::vector<Shard> shards_;
  int64_t size_ = 0;
};

}  // namespace inkstone
