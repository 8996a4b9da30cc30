#include "dataset/data_prepare.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <optional>

#include <fmt/format.h>
#include <xxhash.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/progress.h"
#include "dataset/prompt_format.h"

namespace inkstone {
namespace fs = std::filesystem;
namespace {

constexpr const char* kValidationRule =
    "documents numbered from 0 in input order; 0 is train; if fraction > 0, 1 is val and i >= 2 is val when "
    "xxh64(first chunk of its text, seed i) / 2^64 < fraction";
constexpr const char* kTailValidationRule =
    "the last fraction of each file's bytes, from the first line start at or after the cut, is val";

// A run of one document's text as it is read; a document arrives as one piece or, when large, several.
struct DocumentPiece {
  std::string_view text;
  bool starts_document = false;
  bool ends_document = false;
  int64_t file_bytes_read = 0;  // how far into the file reading has got, for progress
  // A conversation (chat format), already encoded with its loss mask; `text` is its rendering.
  const EncodedConversation* conversation = nullptr;
  bool eos_trained = false;
  // A turn of the conversation before it (--split-turns): the same split, so no conversation spans both.
  bool same_split_as_previous = false;
};

using PieceHandler = std::function<void(const DocumentPiece&)>;

bool is_hidden(const fs::path& path) { return path.filename().string().rfind('.', 0) == 0; }

std::vector<fs::path> expand_inputs(const std::vector<fs::path>& inputs) {
  if (inputs.empty()) throw InputError("no inputs given (--input PATH...)");
  std::vector<fs::path> files;
  for (const auto& input : inputs) {
    if (!fs::exists(input)) throw InputError(fmt::format("input {} not found", input.string()));
    if (!fs::is_directory(input)) {
      if (fs::file_size(input) == 0) throw InputError(fmt::format("input file {} is empty", input.string()));
      files.push_back(input);
      continue;
    }
    std::vector<fs::path> found;
    for (auto it = fs::recursive_directory_iterator(input); it != fs::recursive_directory_iterator(); ++it) {
      if (is_hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) found.push_back(it->path());
    }
    if (found.empty()) throw InputError(fmt::format("input folder {} holds no files", input.string()));
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

std::ifstream open_input(const fs::path& file) {
  return open_input_file(file, "input");
}

// Where to end a piece of `buffer`: after its last newline, or else before a trailing UTF-8 sequence that the
// next chunk completes, so a tokenizer never sees half a character.
size_t piece_end(const std::string& buffer) {
  const size_t newline = buffer.rfind('\n');
  if (newline != std::string::npos) return newline + 1;
  auto byte = [&](size_t i) { return static_cast<unsigned char>(buffer[i]); };
  size_t lead = buffer.size();  // one past the last byte that is not a continuation byte (10xxxxxx)
  while (lead > 0 && buffer.size() - lead < 3 && (byte(lead - 1) & 0xC0) == 0x80) --lead;
  if (lead == 0) return buffer.size();
  const unsigned char first = byte(lead - 1);
  const size_t length = first >= 0xF0 ? 4 : first >= 0xE0 ? 3 : first >= 0xC0 ? 2 : 1;
  return lead - 1 + length > buffer.size() ? lead - 1 : buffer.size();
}

void read_text(const fs::path& file, int64_t chunk_bytes, const PieceHandler& on_piece) {
  std::ifstream in = open_input(file);
  std::vector<char> chunk(static_cast<size_t>(chunk_bytes));
  std::string buffer;  // the unsent tail of earlier chunks, then the new chunk
  int64_t sent_bytes = 0;
  bool first = true;
  while (true) {
    in.read(chunk.data(), chunk_bytes);
    buffer.append(chunk.data(), static_cast<size_t>(in.gcount()));
    if (in.eof()) {
      if (!buffer.empty() || !first) {
        on_piece({buffer, first, true, sent_bytes + static_cast<int64_t>(buffer.size())});
      }
      return;
    }
    const size_t end = piece_end(buffer);
    if (end == 0) continue;
    sent_bytes += static_cast<int64_t>(end);
    on_piece({std::string_view(buffer).substr(0, end), first, false, sent_bytes});
    first = false;
    buffer.erase(0, end);
  }
}

// Every non-blank line of a JSONL file as a parsed record, with "file:line" for errors and how far reading has got.
template <typename OnRecord>
void for_each_json_line(const fs::path& file, OnRecord&& on_record) {
  std::ifstream in = open_input(file);
  std::string line;
  int64_t line_number = 0, read_bytes = 0;
  while (std::getline(in, line)) {
    ++line_number;
    read_bytes += static_cast<int64_t>(line.size()) + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", file.string(), line_number);
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded()) throw InputError(fmt::format("{}: not valid JSON", where));
    on_record(record, where, read_bytes);
  }
}

void read_jsonl(const fs::path& file, const std::string& field, const PieceHandler& on_piece) {
  for_each_json_line(file, [&](const nlohmann::json& record, const std::string& where, int64_t read_bytes) {
    if (!record.is_object() || !record.contains(field) || !record[field].is_string())
      throw InputError(fmt::format("{}: no string field '{}'", where, field));
    const auto& text = record[field].get_ref<const std::string&>();
    if (!text.empty()) on_piece({text, true, true, read_bytes});
  });
}

// One conversation of a chat JSONL line (dataset/data_prepare.h); InputError naming file:line and the key. A text
// holding one of the format's turn markers is refused: it would be encoded as a turn of its own.
std::vector<ChatMessage> conversation_of(const nlohmann::json& record, const std::string& where,
                                         const PromptFormat& format) {
  if (!record.is_object()) throw InputError(fmt::format("{}: a conversation must be a JSON object", where));
  const auto markers = format.turn_markers();
  const auto text_of = [&](const nlohmann::json& value, const std::string& key) {
    if (!value.is_string()) throw InputError(fmt::format("{}: '{}' must be a string", where, key));
    std::string text = value.get<std::string>();
    for (const std::string_view marker : markers)
      if (text.find(marker) != std::string::npos)
        throw InputError(fmt::format("{}: '{}' holds '{}', which marks turns in this chat format", where, key, marker));
    return text;
  };
  std::vector<ChatMessage> messages;
  if (const auto list = record.find("messages"); list != record.end()) {
    if (!list->is_array() || list->empty())
      throw InputError(fmt::format("{}: 'messages' must be a non-empty list of {{role, content}}", where));
    for (size_t i = 0; i < list->size(); ++i) {
      const auto& m = (*list)[i];
      const std::string key = fmt::format("messages[{}]", i);
      if (!m.is_object() || !m.contains("role") || !m.contains("content"))
        throw InputError(fmt::format("{}: '{}' must be an object with 'role' and 'content'", where, key));
      const std::string role = text_of(m["role"], key + ".role");
      if (role != "system" && role != "user" && role != "assistant")
        throw InputError(fmt::format("{}: '{}.role' is '{}' (expected system, user or assistant)", where, key, role));
      messages.push_back({role, text_of(m["content"], key + ".content")});
    }
  } else if (record.contains("prompt")) {
    const auto response = record.contains("response") ? "response" : "completion";
    if (!record.contains(response))
      throw InputError(fmt::format("{}: 'prompt' without 'response' (or 'completion')", where));
    messages = {{"user", text_of(record["prompt"], "prompt")}, {"assistant", text_of(record[response], response)}};
  } else {
    throw InputError(fmt::format("{}: a conversation needs 'messages' or 'prompt' and 'response'", where));
  }
  if (std::none_of(messages.begin(), messages.end(), [](const ChatMessage& m) { return m.role == "assistant"; }))
    throw InputError(fmt::format("{}: the conversation has no assistant message to train on", where));
  return messages;
}

// Ends each conversation after its last assistant message and trains on that message alone (the turns before it
// are context): --split-turns writes one such conversation per assistant message (LLaDA's multi-turn SFT).
std::vector<std::vector<ChatMessage>> single_response_conversations(const std::vector<ChatMessage>& messages) {
  std::vector<std::vector<ChatMessage>> out;
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == "assistant") out.emplace_back(messages.begin(), messages.begin() + i + 1);
  return out;
}

int64_t count_responses(const std::vector<ChatMessage>& messages) {
  return std::count_if(messages.begin(), messages.end(), [](const ChatMessage& m) { return m.role == "assistant"; });
}

void read_chat(const fs::path& file, const PrepareOptions& options, const PromptFormat& format,
               const PieceHandler& on_piece, int64_t& multi_response_conversations) {
  for_each_json_line(file, [&](const nlohmann::json& record, const std::string& where, int64_t read_bytes) {
    const auto messages = conversation_of(record, where, format);
    const auto conversations =
        options.split_turns ? single_response_conversations(messages) : std::vector<std::vector<ChatMessage>>{messages};
    for (size_t turn = 0; turn < conversations.size(); ++turn) {
      const auto& conversation = conversations[turn];
      const bool earlier_responses_trained = !options.split_turns;
      EncodedConversation encoded =
          format.encode_conversation(conversation, options.train_on_all, earlier_responses_trained);
      if (earlier_responses_trained && count_responses(conversation) > 1) ++multi_response_conversations;
      // A prompt that starts from eos starts from the eos ending the document before it, as in pretraining on
      // eos-separated documents; written again, that eos would end a document of its own.
      if (options.chat.prompt_start == PromptStart::eos) {
        encoded.ids.erase(encoded.ids.begin());
        encoded.trained.erase(encoded.trained.begin());
      }
      std::string rendered;
      for (const auto& segment : format.render_conversation(conversation)) rendered += segment.text;
      DocumentPiece piece{rendered, true, true, read_bytes, &encoded, false};
      piece.eos_trained = options.train_on_all || conversation.back().role == "assistant";
      piece.same_split_as_previous = turn > 0;
      on_piece(piece);
    }
  });
}

void read_fortunes(const fs::path& file, const PieceHandler& on_piece) {
  std::ifstream in = open_input(file);
  std::string line, entry;
  int64_t read_bytes = 0;
  while (std::getline(in, line)) {
    read_bytes += static_cast<int64_t>(line.size()) + 1;
    if (line == "%") {
      if (!entry.empty()) on_piece({entry, true, true, read_bytes});
      entry.clear();
    } else {
      entry += line;
      entry += '\n';
    }
  }
  if (!entry.empty()) on_piece({entry, true, true, read_bytes});
}

void read_documents(const fs::path& file, const PrepareOptions& options, const PromptFormat& format,
                    const PieceHandler& on_piece, int64_t& multi_response_conversations) {
  switch (options.format) {
    case InputFormat::text: return read_text(file, options.chunk_bytes, on_piece);
    case InputFormat::jsonl: return read_jsonl(file, options.jsonl_field, on_piece);
    case InputFormat::fortune: return read_fortunes(file, on_piece);
    case InputFormat::chat: return read_chat(file, options, format, on_piece, multi_response_conversations);
  }
}

void check_options(const PrepareOptions& options) {
  if (!(options.val_fraction >= 0 && options.val_fraction < 1)) {
    throw InputError(fmt::format("--val-fraction {} must be in [0, 1)", options.val_fraction));
  }
  if (options.max_shard_tokens < 1 || options.chunk_bytes < 1) {
    throw InputError("shard size and read chunk must be at least 1");
  }
  if (options.out_dir.empty()) throw InputError("no output folder given (--out DIR)");
  if (options.val_split == ValSplit::tail && options.format != InputFormat::text)
    throw InputError("--val-split tail cuts text files; it does not apply to jsonl, fortune or chat input");
}

// Drops what an earlier prepare left in `dir`: the manifest first, so the folder never looks complete meanwhile.
void clear_previous_output(const fs::path& dir) {
  fs::remove(manifest_path(dir));
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const auto extension = entry.path().extension();
    const bool shard = (extension == ".bin" || extension == ".mask") &&
                       (name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0);
    if (shard) fs::remove(entry.path());
  }
}

// A text file as two documents: bytes before the cut (the first line start at or after (1 − f)·size) for
// training, the rest for validation. Pieces end at newlines (read_text), so a cut inside a piece with no line
// start after it falls at the piece's end.
void read_text_with_tail_split(const fs::path& file, const PrepareOptions& options,
                               const std::function<void(const DocumentPiece&, bool)>& on_piece) {
  const auto size = static_cast<int64_t>(fs::file_size(file));
  const auto cut = static_cast<int64_t>(std::ceil((1.0 - options.val_fraction) * static_cast<double>(size)));
  int64_t offset = 0;
  bool in_tail = false, tail_started = false;
  read_text(file, options.chunk_bytes, [&](const DocumentPiece& piece) {
    const int64_t start = offset;
    offset += static_cast<int64_t>(piece.text.size());
    if (!in_tail && offset > cut) {
      // The head ends at the first line start at or after the cut within this piece.
      size_t split_at = piece.text.size();
      const int64_t local = cut - start;
      if (local <= 0) {
        split_at = 0;
      } else if (size_t newline = piece.text.find('\n', static_cast<size_t>(local - 1));
                 newline != std::string_view::npos) {
        split_at = newline + 1;
      }
      // Always sent, empty when the cut falls exactly at this piece's start, to end the training document.
      on_piece({piece.text.substr(0, split_at), piece.starts_document, true, piece.file_bytes_read}, false);
      in_tail = true;
      if (split_at < piece.text.size()) {
        on_piece({piece.text.substr(split_at), true, piece.ends_document, piece.file_bytes_read}, true);
        tail_started = true;
      }
      return;
    }
    if (in_tail) {
      on_piece({piece.text, !tail_started, piece.ends_document, piece.file_bytes_read}, true);
      tail_started = true;
      return;
    }
    on_piece(piece, false);
  });
}

}  // namespace

InputFormat input_format_from_name(const std::string& name) {
  if (name == "text") return InputFormat::text;
  if (name == "jsonl") return InputFormat::jsonl;
  if (name == "fortune") return InputFormat::fortune;
  if (name == "chat") return InputFormat::chat;
  throw InputError(fmt::format("unknown input format '{}' (expected text, jsonl, fortune or chat)", name));
}

std::vector<fs::path> fortune_files(const fs::path& folder) {
  const std::string fix = "install the corpus with: apt-get install fortunes";
  if (!fs::is_directory(folder)) {
    throw InputError(fmt::format("fortunes folder {} not found; {}", folder.string(), fix));
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(folder)) {
    const fs::path& path = entry.path();
    if (entry.is_regular_file() && !path.has_extension() && fs::exists(path.string() + ".dat")) files.push_back(path);
  }
  if (files.empty()) throw InputError(fmt::format("fortunes folder {} holds no fortune files; {}", folder.string(), fix));
  std::sort(files.begin(), files.end());
  return files;
}

PrepareOptions fortunes_preset(const fs::path& folder) {
  PrepareOptions options;
  options.inputs = fortune_files(folder);
  options.format = InputFormat::fortune;
  return options;
}

bool is_validation_document(std::string_view content, int64_t index, double val_fraction) {
  if (index == 0 || val_fraction <= 0) return false;
  if (index == 1) return true;
  const uint64_t hash = XXH64(content.data(), content.size(), static_cast<uint64_t>(index));
  return static_cast<double>(hash) < std::ldexp(val_fraction, 64);
}

PrepareSummary prepare_data(const PrepareOptions& options, const Tokenizer& tokenizer) {
  check_options(options);
  const std::vector<fs::path> files = expand_inputs(options.inputs);
  const int32_t eos = tokenizer.specials().eos;
  if (eos < 0) throw InputError("the tokenizer has no eos token, which separates documents");
  int64_t input_bytes = 0;
  for (const auto& file : files) input_bytes += static_cast<int64_t>(fs::file_size(file));

  fs::create_directories(options.out_dir);
  clear_previous_output(options.out_dir);
  const int64_t vocab_size = tokenizer.vocab_size();
  const int64_t unrepresented_before = tokenizer.unrepresented_bytes();
  const TokenDtype dtype = dtype_for_vocab(vocab_size);
  const bool chat = options.format == InputFormat::chat;
  const PromptFormat format(options.chat, tokenizer);
  ShardWriter train(options.out_dir, "train", dtype, vocab_size, options.max_shard_tokens, chat);
  ShardWriter val(options.out_dir, "val", dtype, vocab_size, options.max_shard_tokens, chat);

  ProgressBar progress("prepare", input_bytes, ProgressBar::Unit::bytes);
  int64_t documents = 0, assigned = 0, tokens = 0, finished_files_bytes = 0, multi_response_conversations = 0;
  auto counters = [&] {
    return fmt::format("{} docs, {} tokens, {} tokens/s", human_count(documents), human_count(tokens),
                       human_count(tokens / std::max(progress.elapsed_s(), 1e-9)));
  };
  ShardWriter* split = nullptr;
  auto add_piece = [&](const fs::path& file, const DocumentPiece& piece, std::optional<bool> validation) {
      if (piece.starts_document) {
        // The rule numbers what is assigned: the turns of one split conversation count once.
        if (!piece.same_split_as_previous) {
          const bool to_val =
              validation.value_or(is_validation_document(piece.text, assigned++, options.val_fraction));
          split = to_val ? &val : &train;
        }
        ++documents;
      }
      const auto* conversation = piece.conversation;
      std::vector<int32_t> ids = conversation ? conversation->ids : tokenizer.encode(piece.text);
      std::vector<uint8_t> trained = conversation ? conversation->trained : std::vector<uint8_t>();
      if (piece.ends_document) ids.push_back(eos);
      if (conversation) trained.push_back(piece.eos_trained);
      try {
        if (conversation) split->append(ids, conversation->text_bytes, trained, conversation->trained_bytes);
        else split->append(ids, static_cast<int64_t>(piece.text.size()));
      } catch (const InputError& e) {
        throw InputError(fmt::format("{}: {}", file.string(), e.what()));
      }
      if (piece.ends_document) split->end_document();
      tokens += static_cast<int64_t>(ids.size());
      if (options.show_progress) progress.update(finished_files_bytes + piece.file_bytes_read, counters());
  };
  for (const auto& file : files) {
    if (options.val_split == ValSplit::tail) {
      read_text_with_tail_split(file, options, [&](const DocumentPiece& piece, bool validation) {
        add_piece(file, piece, validation);
      });
    } else {
      read_documents(
          file, options, format, [&](const DocumentPiece& piece) { add_piece(file, piece, std::nullopt); },
          multi_response_conversations);
    }
    finished_files_bytes += static_cast<int64_t>(fs::file_size(file));
  }
  if (documents == 0) throw InputError(fmt::format("no documents in the {} input file(s)", files.size()));

  Manifest manifest;
  manifest.tokenizer_kind = tokenizer.kind();
  manifest.tokenizer_fingerprint = tokenizer.fingerprint();
  manifest.vocab_size = vocab_size;
  manifest.eos = eos;
  manifest.pad = tokenizer.specials().pad;
  manifest.dtype = dtype;
  manifest.val_fraction = options.val_fraction;
  manifest.val_rule = options.val_split == ValSplit::tail ? kTailValidationRule : kValidationRule;
  manifest.loss_mask = chat;
  if (chat)
    manifest.chat = ChatRecord{choice_name(options.chat.format), options.chat.system,
                               choice_name(options.chat.prompt_start), multi_response_conversations};
  manifest.splits["train"] = train.finish();
  manifest.splits["val"] = val.finish();
  tokenizer.save(options.out_dir / "tokenizer.json");
  write_manifest(options.out_dir, manifest);
  if (options.show_progress) progress.finish(input_bytes, counters());
  return {manifest, input_bytes, tokenizer.unrepresented_bytes() - unrepresented_before, progress.elapsed_s()};
}

}  // namespace inkstone
