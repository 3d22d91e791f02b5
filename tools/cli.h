#pragma once
// Command-line helpers shared by the examples. Plain C++; nothing here depends on strata.

#include <charconv>
#include <optional>
#include <string_view>

namespace cli {

/// The whole of `text` as a T, or nothing: "1e4" or "5x" for an integer, or "-1" for an unsigned one, is not a
/// number (std::stoi would read 1 and 5, std::stoull a huge value).
template <class T>
std::optional<T> parse_number(std::string_view text) {
  T out{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, out);
  if (error != std::errc() || stop != end) return std::nullopt;
  return out;
}

}  // namespace cli
