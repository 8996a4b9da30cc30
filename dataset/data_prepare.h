// `inkstone data prepare`: text files, folders of them, JSONL or fortune files into token shards with a
// manifest (dataset/shards.h), streaming in bounded memory.
//
// Documents. text: a file is one document. jsonl: each non-blank line is a JSON object, its string field
// `jsonl_field` one document. fortune: entries separated by lines holding only '%', one document each.
// chat: each non-blank line is one conversation, {"messages": [{"role": "system" | "user" | "assistant",
// "content": "..."}, ...]} or {"prompt": "...", "response": "..."} ("completion" is taken for "response"),
// rendered in `chat`'s format (dataset/prompt_format.h) with a loss mask on the responses (all tokens with
// `train_on_all`); the eos that ends it is trained when the conversation ends with a response. With
// chat.prompt_start = eos the eos ending the previous conversation is its start token. With `split_turns` a
// conversation of n assistant messages is written as n conversations, the k-th ending after the k-th response and
// trained on it alone (the turns before are context); they count as one document for the validation split.
// Documents with no bytes are skipped; every other one is encoded and ends with eos. Folders are read
// recursively in sorted path order, skipping names that start with '.', so a folder always gives the same shards.
//
// Validation split. Documents are numbered in input order from 0. Document 0 is training; when val_fraction > 0,
// document 1 is validation and document i >= 2 is validation when xxh64(content, seed = i) / 2^64 < val_fraction.
// Pinning documents 0 and 1 guarantees both splits are non-empty for any corpus of two or more documents
// without a second pass over the input. Content is the document's first read chunk (all of it below
// chunk_bytes). Each document lies wholly in one split, so the splits are disjoint.
//
// Tail split (text format only, for a corpus that is one long file such as tinyshakespeare): the last
// val_fraction of every file's bytes, from the first line start at or after the cut, is a validation document
// and the rest a training one; the usual "first 90% train, last 10% val" split.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "dataset/shards.h"
#include "dataset/tokenizer.h"

namespace inkstone {

enum class InputFormat { text, jsonl, fortune, chat };
enum class ValSplit { documents, tail };

// "text", "jsonl", "fortune" or "chat"; anything else is an InputError.
InputFormat input_format_from_name(const std::string& name);

struct PrepareOptions {
  std::vector<std::filesystem::path> inputs;  // files or folders
  std::filesystem::path out_dir;
  InputFormat format = InputFormat::text;
  std::string jsonl_field = "text";
  ChatConfig chat = default_config().chat;  // format == chat: how conversations render (the run's [chat])
  bool train_on_all = false;                // format == chat: no loss mask on prompts
  bool split_turns = false;                 // format == chat: one conversation per assistant message
  double val_fraction = 0.05;
  ValSplit val_split = ValSplit::documents;
  int64_t max_shard_tokens = int64_t{64} << 20;
  // Text documents are read and encoded in pieces of about this size, cut after a newline where possible.
  int64_t chunk_bytes = int64_t{16} << 20;
  bool show_progress = false;
};

struct PrepareSummary {
  Manifest manifest;
  int64_t input_bytes = 0;
  int64_t unrepresented_bytes = 0;  // input bytes no token stands for, left out (Tokenizer::unrepresented_bytes)
  double seconds = 0;
};

// Where the Debian `fortunes` package installs its English files.
inline constexpr const char* kFortunesFolder = "/usr/share/games/fortunes";

// The English fortune files of `folder`: files without an extension that have a `.dat` sibling, sorted; the
// subfolders ('off', other languages) are left out. InputError with the fix when the folder is missing or empty.
std::vector<std::filesystem::path> fortune_files(const std::filesystem::path& folder = kFortunesFolder);

// `--preset fortunes`: the English fortune files, one document per entry.
PrepareOptions fortunes_preset(const std::filesystem::path& folder = kFortunesFolder);

// The validation rule above.
bool is_validation_document(std::string_view content, int64_t index, double val_fraction);

// Writes OUT_DIR/{train,val}_NNNNN.bin, tokenizer.json and, last, manifest.json (an old manifest is removed
// first, so an interrupted run never leaves a folder that looks complete). InputError for missing or empty
// inputs, malformed JSONL (file:line), ids outside the vocabulary, or no documents at all.
PrepareSummary prepare_data(const PrepareOptions& options, const Tokenizer& tokenizer);

}  // namespace inkstone
