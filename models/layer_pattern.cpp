#include "models/layer_pattern.h"

#include <stdexcept>

namespace inkstone {

std::string expand_layer_pattern(const std::string& pattern, int64_t n_layers) {
  std::string letters;
  for (char ch : pattern)
    if (ch != ' ') letters += ch;
  if (letters.empty() || n_layers % static_cast<int64_t>(letters.size()) != 0)
    throw std::logic_error("layer pattern \"" + pattern + "\" does not tile " + std::to_string(n_layers) +
                           " layers");
  std::string layers;
  while (static_cast<int64_t>(layers.size()) < n_layers) layers += letters;
  return layers;
}

StreamScope stream_scope(const ModelConfig& config, int64_t layer) {
  if (config.hidden_streams == 1) return StreamScope::mixing;  // the pattern is only checked for n > 1
  return expand_layer_pattern(config.hidden_attention, config.n_layers).at(layer) == 'L' ? StreamScope::local
                                                                                         : StreamScope::mixing;
}

}  // namespace inkstone
