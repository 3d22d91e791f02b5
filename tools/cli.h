#pragma once
// Command-line helpers shared by strata-pipe, the examples and the benchmarks (target strata_cli).
// Plain C++; nothing here depends on strata.

#include <charconv>
#include <optional>
#include <string_view>

namespace cli {

/// The whole of `text` as a T, or nothing: "1e4" or "5x" for an integer, or "-1" for an unsigned one, is not a
/// number (std::stoi would read 1 and 5, std::stoull a huge value). `out_of_range`, when given, says whether
/// the text was a number too large for T.
template <class T>
std::optional<T> parse_number(std::string_view text, bool* out_of_range = nullptr) {
  T out{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, out);
  if (out_of_range) *out_of_range = error == std::errc::result_out_of_range;
  if (error != std::errc() || stop != end) return std::nullopt;
  return out;
}

}  // namespace cli
