#include "checkpoint/checkpoint.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/input_file.h"

namespace inkstone {
namespace fs = std::filesystem;
namespace {

// The name of a floating tensor that holds NaN or inf, if any: one reduction per tensor and one host transfer per
// device the tensors live on (a GPU run's optimizer state mixes CUDA moments with CPU step counters).
std::optional<std::string> non_finite_tensor(const NamedTensors& tensors) {
  std::map<std::string, std::pair<std::vector<size_t>, std::vector<torch::Tensor>>> by_device;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& tensor = tensors[i].second;
    if (!tensor.is_floating_point()) continue;  // integers cannot be NaN
    auto& [indices, flags] = by_device[tensor.device().str()];
    indices.push_back(i);
    flags.push_back(torch::isfinite(tensor).all());
  }
  for (const auto& [device, group] : by_device) {
    const auto host = torch::stack(group.second).cpu();
    for (size_t k = 0; k < group.first.size(); ++k)
      if (!host[static_cast<int64_t>(k)].item<bool>()) return tensors[group.first[k]].first;
  }
  return std::nullopt;
}

// A diverged update must never become the checkpoint a run resumes from or samples (docs/reliability.md).
void require_finite(const NamedTensors& tensors, const char* part, int64_t step) {
  if (const auto name = non_finite_tensor(tensors))
    throw NonFiniteError(fmt::format(
        "refusing to write the checkpoint of step {}: {} tensor '{}' holds NaN or inf (the update diverged: "
        "check optim.learning_rate, optim.eps, optim.beta1/beta2 and optim.weight_decay); the last checkpoint "
        "is intact",
        step, part, *name));
}

// Training never writes NaN or inf, so a checkpoint that holds one was made or edited elsewhere (a hand-made
// file, an import of a broken model): every reader refuses it by tensor, as the writer would have.
void refuse_non_finite(const NamedTensors& tensors, const fs::path& file) {
  if (const auto name = non_finite_tensor(tensors))
    throw InputError(fmt::format("{}: tensor '{}' holds NaN or inf, which no training run writes (the file was made "
                                 "or edited elsewhere)",
                                 file.string(), *name));
}

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kConfigFile = "config.toml";
constexpr const char* kTokenizerFile = "tokenizer.json";
constexpr const char* kStateFile = "state.json";
// Only written when an objective has trainable weights of its own (FlowRL's log Z head).
constexpr const char* kObjectiveFile = "objective.safetensors";
// The files state.json describes besides the optimizer state; it is written after them, so its presence marks a
// complete write.
const std::array<const char*, 3> kDataFiles = {kModelFile, kConfigFile, kTokenizerFile};
constexpr const char* kShardsKey = "optimizer_shards";

// The optimizer state's files: one, or one per rank of a ZeRO run.
std::vector<std::string> optimizer_files(int64_t shards) {
  if (shards == 0) return {kOptimizerFile};
  std::vector<std::string> files;
  for (int64_t r = 0; r < shards; ++r) files.push_back(optimizer_shard_file(r, shards));
  return files;
}

constexpr const char* kTempMarker = ".tmp-";

std::string step_folder_name(int64_t step) { return fmt::format("step_{:06d}", step); }

fs::path shard_staging_folder(const fs::path& run_dir, int64_t step) {
  return run_dir / "checkpoints" / fmt::format(".{}.shards", step_folder_name(step));
}

// `.step_000123.tmp-<pid><tag>`: hidden, in the same parent (so the rename is atomic), owned by this process.
fs::path temp_folder(const fs::path& parent, int64_t step, const std::string& tag) {
  return parent / fmt::format(".{}{}{}{}", step_folder_name(step), kTempMarker, ::getpid(), tag);
}

std::optional<int64_t> parse_step(const std::string& folder_name) {
  const std::string prefix = "step_";
  if (folder_name.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string digits = folder_name.substr(prefix.size());
  const auto is_digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), is_digit))
    return std::nullopt;
  return std::stoll(digits);
}

// The pid a temporary folder's name carries, if it is one.
std::optional<pid_t> temp_folder_owner(const std::string& folder_name) {
  const size_t marker = folder_name.find(kTempMarker);
  if (folder_name.empty() || folder_name[0] != '.' || marker == std::string::npos) return std::nullopt;
  const size_t begin = marker + std::char_traits<char>::length(kTempMarker);
  size_t end = begin;
  while (end < folder_name.size() && std::isdigit(static_cast<unsigned char>(folder_name[end]))) ++end;
  if (end == begin || end - begin > 9) return std::nullopt;
  return static_cast<pid_t>(std::stol(folder_name.substr(begin, end - begin)));
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

bool is_complete(const fs::path& folder) {
  if (!fs::exists(folder / kStateFile)) return false;
  return std::all_of(kDataFiles.begin(), kDataFiles.end(), [&](const char* f) { return fs::exists(folder / f); });
}

// Final-named checkpoint folders by step, complete or not.
std::vector<std::pair<int64_t, fs::path>> step_folders(const fs::path& parent) {
  std::vector<std::pair<int64_t, fs::path>> folders;
  for (const auto& entry : fs::directory_iterator(parent)) {
    const auto step = parse_step(entry.path().filename().string());
    if (step && entry.is_directory()) folders.emplace_back(*step, entry.path());
  }
  std::sort(folders.begin(), folders.end());
  return folders;
}

struct FileDigest {
  uint64_t bytes = 0;
  std::string xxh64;
};

FileDigest digest_file(const fs::path& path) {
  std::ifstream in = open_input_file(path, "checkpoint file");
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  std::vector<char> buffer(1 << 20);
  FileDigest digest;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    XXH64_update(state, buffer.data(), got);
    digest.bytes += got;
  }
  digest.xxh64 = fmt::format("{:016x}", XXH64_digest(state));
  XXH64_freeState(state);
  return digest;
}

std::string read_text(const fs::path& path) {
  return read_input_file(path, "checkpoint file");
}

nlohmann::json parse_json_file(const fs::path& path) {
  const std::string text = read_text(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON (error at byte {} of {})", path.string(), e.byte, text.size()));
  }
}

// Moves a final-named folder out of the way under a temporary name first, so a crash while deleting it never
// leaves a partial folder that looks like a checkpoint.
void remove_checkpoint_folder(const fs::path& folder, int64_t step, const std::string& tag) {
  const fs::path doomed = temp_folder(folder.parent_path(), step, tag);
  fs::rename(folder, doomed);
  fs::remove_all(doomed);
}

void prune(const fs::path& parent, int64_t keep_last, int64_t just_written) {
  if (keep_last <= 0) return;
  auto folders = step_folders(parent);
  const size_t keep = static_cast<size_t>(keep_last);
  for (size_t i = 0; i + keep < folders.size(); ++i)
    if (folders[i].first != just_written) remove_checkpoint_folder(folders[i].second, folders[i].first, ".pruned");
}

void write_checkpoint_files(const fs::path& folder, const CheckpointData& data, const CheckpointFileHook& after_file) {
  auto done = [&](const char* file) {
    if (after_file) after_file(file);
  };
  if (data.model_planned.empty()) {
    write_safetensors(folder / kModelFile, data.model, {{"format", "pt"}});
  } else {
    write_safetensors_streamed(folder / kModelFile, data.model_planned, {{"format", "pt"}});
  }
  done(kModelFile);
  const auto optimizer = optimizer_files(data.optimizer_shards);
  if (data.optimizer_shards == 0) {
    write_safetensors(folder / kOptimizerFile, data.optimizer);
  } else {
    // Same file system: the ranks' staged shards move in by rename.
    const fs::path staged = shard_staging_folder(folder.parent_path().parent_path(), data.step);
    for (const auto& file : optimizer) {
      if (!fs::exists(staged / file))
        throw std::runtime_error(fmt::format("checkpoint step {}: the optimizer shard {} was not staged in {}",
                                             data.step, file, staged.string()));
      fs::rename(staged / file, folder / file);
    }
  }
  for (const auto& file : optimizer) done(file.c_str());
  write_file_atomic(folder / kConfigFile, data.config_toml);
  done(kConfigFile);
  write_file_atomic(folder / kTokenizerFile, data.tokenizer.dump(2) + "\n");
  done(kTokenizerFile);
  std::vector<std::string> files(kDataFiles.begin(), kDataFiles.end());
  files.insert(files.end(), optimizer.begin(), optimizer.end());
  if (!data.objective.empty()) {
    write_safetensors(folder / kObjectiveFile, data.objective);
    done(kObjectiveFile);
    files.push_back(kObjectiveFile);
  }

  nlohmann::json state = data.state.is_null() ? nlohmann::json::object() : data.state;
  state["step"] = data.step;
  if (data.optimizer_shards > 0) state[kShardsKey] = data.optimizer_shards;
  for (const auto& file : files) {
    const FileDigest digest = digest_file(folder / file);
    state["files"][file] = {{"bytes", digest.bytes}, {"xxh64", digest.xxh64}};
  }
  write_file_atomic(folder / kStateFile, state.dump(2) + "\n");
  done(kStateFile);
  fsync_path(folder);
}

// Checks one data file against the size and hash state.json recorded for it.
void verify_file(const fs::path& folder, const std::string& file, const nlohmann::json& files) {
  const fs::path path = folder / file;
  if (!fs::exists(path)) throw InputError(path.string() + ": missing from the checkpoint");
  const auto record = files.find(file);
  if (record == files.end() || !record->is_object() || !record->value("bytes", nlohmann::json()).is_number_unsigned() ||
      !record->value("xxh64", nlohmann::json()).is_string())
    throw InputError(fmt::format("{}: records no size and hash for {}", (folder / kStateFile).string(), file));
  const FileDigest digest = digest_file(path);
  const uint64_t expected = (*record)["bytes"].get<uint64_t>();
  if (digest.bytes != expected)
    throw InputError(fmt::format("{}: {} ({} bytes, state.json records {})", path.string(),
                                 digest.bytes < expected ? "truncated" : "has extra bytes", digest.bytes, expected));
  if (digest.xxh64 != (*record)["xxh64"].get<std::string>())
    throw InputError(path.string() + ": corrupt (its xxh64 does not match the one state.json records)");
}

CheckpointData load_folder(const fs::path& folder, CheckpointParts parts) {
  const fs::path state_path = folder / kStateFile;
  if (!fs::exists(state_path)) throw InputError(state_path.string() + ": missing from the checkpoint");
  nlohmann::json state = parse_json_file(state_path);
  if (!state.is_object() || !state.contains("step") || !state["step"].is_number_integer() ||
      !state.contains("files") || !state["files"].is_object())
    throw InputError(state_path.string() + ": not a checkpoint state (needs an integer 'step' and a 'files' table)");
  int64_t shards = 0;
  if (state.contains(kShardsKey)) {
    // Each shard has its record in 'files': a larger count is a corrupt state, not a reason to list a billion files.
    if (!state[kShardsKey].is_number_integer() || state[kShardsKey].get<int64_t>() < 1 ||
        state[kShardsKey].get<int64_t>() > static_cast<int64_t>(state["files"].size()))
      throw InputError(fmt::format("{}: '{}' must be a positive integer no larger than the files it records",
                                   state_path.string(), kShardsKey));
    shards = state[kShardsKey].get<int64_t>();
  }
  const bool weights = parts != CheckpointParts::description, everything = parts == CheckpointParts::everything;
  for (const char* file : kDataFiles)
    if (weights || file != kModelFile) verify_file(folder, file, state["files"]);
  if (everything)
    for (const auto& file : optimizer_files(shards)) verify_file(folder, file, state["files"]);
  const bool has_objective = everything && state["files"].contains(kObjectiveFile);
  if (has_objective) verify_file(folder, kObjectiveFile, state["files"]);

  CheckpointData data;
  data.state_origin = state_path.string();
  data.step = state["step"].get<int64_t>();
  if (data.step < 0) throw InputError(fmt::format("{}: step {} is negative", state_path.string(), data.step));
  // A checkpoint folder is named after its step; a disagreement means an edited or misplaced state.json.
  if (const auto named = parse_step(folder.filename().string()); named && *named != data.step)
    throw InputError(fmt::format("{}: step {} but the folder is {}", state_path.string(), data.step,
                                 folder.filename().string()));
  state.erase("step");
  state.erase("files");
  state.erase(kShardsKey);
  data.state = std::move(state);
  data.folder = folder;
  data.optimizer_shards = shards;
  if (weights) data.model = read_safetensors(folder / kModelFile).tensors;
  refuse_non_finite(data.model, folder / kModelFile);
  if (everything && shards == 0) data.optimizer = read_safetensors(folder / kOptimizerFile).tensors;
  refuse_non_finite(data.optimizer, folder / kOptimizerFile);
  if (has_objective) data.objective = read_safetensors(folder / kObjectiveFile).tensors;
  refuse_non_finite(data.objective, folder / kObjectiveFile);
  data.config_toml = read_text(folder / kConfigFile);
  data.tokenizer = parse_json_file(folder / kTokenizerFile);
  return data;
}

}  // namespace

fs::path save_checkpoint(const fs::path& run_dir, const CheckpointData& data, int64_t keep_last,
                         const CheckpointFileHook& after_file) {
  if (data.step < 0) throw std::invalid_argument("save_checkpoint: negative step");
  if (data.state.contains("step") || data.state.contains("files") || data.state.contains(kShardsKey))
    throw std::invalid_argument("save_checkpoint: 'step', 'files' and 'optimizer_shards' are reserved keys of the "
                                "checkpoint state");
  require_finite(data.model, "model", data.step);
  require_finite(data.objective, "objective", data.step);
  require_finite(data.optimizer, "optimizer", data.step);
  const fs::path parent = run_dir / "checkpoints";
  fs::create_directories(parent);
  const fs::path final_folder = parent / step_folder_name(data.step);
  const fs::path temp = temp_folder(parent, data.step, "");
  fs::remove_all(temp);
  fs::create_directory(temp);
  try {
    write_checkpoint_files(temp, data, after_file);
    if (fs::exists(final_folder)) remove_checkpoint_folder(final_folder, data.step, ".replaced");
    fs::rename(temp, final_folder);
    fsync_path(parent);
    if (data.optimizer_shards > 0) fs::remove_all(shard_staging_folder(run_dir, data.step));
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(temp, ignored);
    throw;
  }
  prune(parent, keep_last, data.step);
  return final_folder;
}

std::optional<fs::path> latest_checkpoint(const fs::path& run_dir) {
  const fs::path parent = run_dir / "checkpoints";
  if (!fs::is_directory(parent)) return std::nullopt;
  for (const auto& entry : fs::directory_iterator(parent)) {
    const auto owner = temp_folder_owner(entry.path().filename().string());
    if (owner && !process_alive(*owner)) {
      std::error_code ignored;  // another process may be cleaning it up at the same moment
      fs::remove_all(entry.path(), ignored);
    }
  }
  const auto folders = step_folders(parent);
  for (auto it = folders.rbegin(); it != folders.rend(); ++it)
    if (is_complete(it->second)) return it->second;
  return std::nullopt;
}

CheckpointData load_checkpoint(const fs::path& dir_or_run_dir, CheckpointParts parts) {
  if (!fs::is_directory(dir_or_run_dir)) throw InputError(dir_or_run_dir.string() + ": no such checkpoint folder");
  if (fs::exists(dir_or_run_dir / kStateFile) || !fs::is_directory(dir_or_run_dir / "checkpoints"))
    return load_folder(dir_or_run_dir, parts);
  const auto latest = latest_checkpoint(dir_or_run_dir);
  if (!latest) throw InputError((dir_or_run_dir / "checkpoints").string() + ": no complete checkpoint");
  return load_folder(*latest, parts);
}

std::string optimizer_shard_file(int64_t rank, int64_t shards) {
  return fmt::format("optimizer.rank{:05d}-of-{:05d}.safetensors", rank, shards);
}

void stage_optimizer_shard(const fs::path& run_dir, int64_t step, int64_t rank, int64_t shards,
                           const NamedTensors& state) {
  require_finite(state, "optimizer", step);
  const fs::path staged = shard_staging_folder(run_dir, step);
  fs::create_directories(staged);
  write_safetensors(staged / optimizer_shard_file(rank, shards), state);  // atomic: temporary file, then rename
}

NamedTensors read_optimizer_shard(const CheckpointData& checkpoint, int64_t rank) {
  if (rank < 0 || rank >= checkpoint.optimizer_shards)
    throw std::invalid_argument(fmt::format("read_optimizer_shard: no shard {} of {}", rank,
                                            checkpoint.optimizer_shards));
  return read_safetensors(checkpoint.folder / optimizer_shard_file(rank, checkpoint.optimizer_shards)).tensors;
}

void consolidate_optimizer_shards(CheckpointData& checkpoint) {
  for (int64_t r = 0; r < checkpoint.optimizer_shards; ++r) {
    auto shard = read_optimizer_shard(checkpoint, r);
    checkpoint.optimizer.insert(checkpoint.optimizer.end(), shard.begin(), shard.end());
  }
  checkpoint.optimizer_shards = 0;
}

int64_t state_count(const CheckpointData& checkpoint, const std::string& key) {
  const auto found = checkpoint.state.find(key);
  if (found == checkpoint.state.end())
    throw InputError(fmt::format("{}: has no '{}'", checkpoint.state_origin, key));
  if (!found->is_number_integer() || found->get<int64_t>() < 0)
    throw InputError(fmt::format("{}: '{}' must be a non-negative integer, found {}", checkpoint.state_origin, key,
                                 found->dump()));
  return found->get<int64_t>();
}

double state_number(const CheckpointData& checkpoint, const std::string& key, double fallback) {
  const auto found = checkpoint.state.find(key);
  if (found == checkpoint.state.end()) return fallback;
  if (!found->is_number())
    throw InputError(fmt::format("{}: '{}' must be a number, found {}", checkpoint.state_origin, key, found->dump()));
  return found->get<double>();
}

}  // namespace inkstone
