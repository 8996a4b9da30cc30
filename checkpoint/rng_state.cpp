#include "checkpoint/rng_state.h"

#include <ATen/Context.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/counter_hash.h"
#include "core/errors.h"
#include "core/json_error.h"

namespace inkstone {
namespace {

constexpr char kBase64Alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// RFC 4648 base64 with '=' padding.
std::string base64_encode(const uint8_t* data, size_t size) {
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (size_t i = 0; i < size; i += 3) {
    uint32_t chunk = uint32_t{data[i]} << 16;
    if (i + 1 < size) chunk |= uint32_t{data[i + 1]} << 8;
    if (i + 2 < size) chunk |= data[i + 2];
    out += kBase64Alphabet[(chunk >> 18) & 63];
    out += kBase64Alphabet[(chunk >> 12) & 63];
    out += i + 1 < size ? kBase64Alphabet[(chunk >> 6) & 63] : '=';
    out += i + 2 < size ? kBase64Alphabet[chunk & 63] : '=';
  }
  return out;
}

std::optional<std::vector<uint8_t>> base64_decode(const std::string& text) {
  std::array<int, 256> value;
  value.fill(-1);
  for (int i = 0; i < 64; ++i) value[static_cast<unsigned char>(kBase64Alphabet[i])] = i;
  if (text.size() % 4 != 0) return std::nullopt;
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int padding = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    uint32_t chunk = 0;
    for (int j = 0; j < 4; ++j) {
      const int v = j >= 4 - padding ? 0 : value[static_cast<unsigned char>(text[i + j])];
      if (v < 0) return std::nullopt;
      chunk = (chunk << 6) | static_cast<uint32_t>(v);
    }
    out.push_back(static_cast<uint8_t>(chunk >> 16));
    if (padding < 2) out.push_back(static_cast<uint8_t>(chunk >> 8));
    if (padding < 1) out.push_back(static_cast<uint8_t>(chunk));
  }
  return out;
}

// A generator's state is a CPU uint8 tensor; the generator's mutex keeps a concurrent draw from tearing it.
std::string capture(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  torch::Tensor state = generator.get_state().contiguous();
  return base64_encode(state.data_ptr<uint8_t>(), static_cast<size_t>(state.numel()));
}

void restore(at::Generator generator, const nlohmann::json& encoded, const std::string& what,
             const std::string& origin) {
  std::optional<std::vector<uint8_t>> bytes;
  if (encoded.is_string()) bytes = base64_decode(encoded.get<std::string>());
  if (!bytes) throw InputError(origin + ": RNG state '" + what + "' is not a base64 string");
  torch::Tensor state = torch::empty({static_cast<int64_t>(bytes->size())}, torch::kUInt8);
  std::copy(bytes->begin(), bytes->end(), state.data_ptr<uint8_t>());
  std::lock_guard<std::mutex> lock(generator.mutex());
  try {
    generator.set_state(state);
  } catch (const c10::Error&) {
    // libtorch rejects a state of the wrong size or version with a multi-line message.
    throw InputError(origin + ": RNG state '" + what + "' is not a valid generator state for this libtorch");
  }
}

#ifdef INKSTONE_CUDA
at::Generator cuda_generator(int64_t device) {
  return at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
}
#endif

}  // namespace

nlohmann::json capture_rng_state() {
  nlohmann::json state = {{"cpu", capture(at::detail::getDefaultCPUGenerator())}};
#ifdef INKSTONE_CUDA
  if (torch::cuda::is_available()) {
    nlohmann::json cuda = nlohmann::json::array();
    for (int64_t device = 0; device < static_cast<int64_t>(torch::cuda::device_count()); ++device)
      cuda.push_back(capture(cuda_generator(device)));
    state["cuda"] = std::move(cuda);
  }
#endif
  return state;
}

void restore_rng_state(const nlohmann::json& state, const std::string& origin) {
  if (!state.is_object() || !state.contains("cpu")) throw InputError(origin + ": RNG state has no 'cpu' entry");
  restore(at::detail::getDefaultCPUGenerator(), state["cpu"], "cpu", origin);
  const auto cuda = state.find("cuda");
  if (cuda == state.end()) return;
  if (!cuda->is_array()) throw InputError(origin + ": RNG state 'cuda' is not a list");
#ifdef INKSTONE_CUDA
  if (!torch::cuda::is_available()) return;
  const int64_t devices = std::min<int64_t>(static_cast<int64_t>(cuda->size()), torch::cuda::device_count());
  for (int64_t device = 0; device < devices; ++device)
    restore(cuda_generator(device), (*cuda)[device], "cuda:" + std::to_string(device), origin);
#endif
}

nlohmann::json run_rng_record(const std::vector<std::string>& rank_states) {
  const auto world_size = static_cast<int64_t>(rank_states.size());
  nlohmann::json record = {{"world_size", world_size}, {"rng", nlohmann::json::parse(rank_states.at(0))}};
  if (world_size > 1) {
    record["rng_ranks"] = nlohmann::json::array();
    for (const auto& text : rank_states) record["rng_ranks"].push_back(nlohmann::json::parse(text));
  }
  return record;
}

void restore_rank_rng(const nlohmann::json& state, int64_t rank, int64_t world_size, int64_t step) {
  if (state.value("consolidated", false)) {
    restore_rng_state(json_member(state, "rng", json_null()), "state.json");
    if (rank > 0) seed_rank_stream(static_cast<uint64_t>(step), rank);
    return;
  }
  const auto saved = state.find("world_size");
  if (saved != state.end() && !saved->is_number_integer())
    throw InputError(fmt::format("checkpoint step {}: state.json 'world_size' must be an integer", step));
  const int64_t saved_ranks = saved == state.end() ? 1 : saved->get<int64_t>();
  if (saved_ranks != world_size)
    throw InputError(fmt::format("checkpoint step {} was written by {} rank(s) but this run has {}: resume with "
                                 "the same number of processes (each rank's random stream is restored)",
                                 step, saved_ranks, world_size));
  if (world_size == 1) {
    restore_rng_state(json_member(state, "rng", json_null()), "state.json");
    return;
  }
  const nlohmann::json& streams = json_member(state, "rng_ranks", json_null());
  if (!streams.is_array() || static_cast<int64_t>(streams.size()) != saved_ranks)
    throw InputError(fmt::format("checkpoint step {}: state.json 'rng_ranks' must hold {} entries", step, saved_ranks));
  restore_rng_state(streams.at(static_cast<size_t>(rank)), "state.json");
}

void seed_rank_stream(uint64_t seed, int64_t rank) {
  torch::manual_seed(counter_hash({seed, static_cast<uint64_t>(rank)}));
}

}  // namespace inkstone
