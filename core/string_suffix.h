// std::string_view::ends_with arrives in C++20; the project builds as C++17.
#pragma once
#include <string_view>

namespace inkstone {

inline bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace inkstone
