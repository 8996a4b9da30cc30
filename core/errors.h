// Error kinds that map to the CLI's exit codes: InputError -> 2 (usage, config, bad input), anything else -> 1.
#pragma once
#include <stdexcept>
#include <string>

namespace inkstone {

// Bad input from the user: a config key, a file, a token id. The message is one line that names the culprit.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace inkstone
