#pragma once
// What the distributed examples (pipeline, char_gpt) share while they set up: their command-line errors and
// how every rank agrees that setting up failed.

#include <optional>
#include <stdexcept>
#include <string>

#include "cli.h"

namespace setup {

/// A bad command line: the example prints it with its usage.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The value of `flag` as a T, or a UsageError naming both.
template <class T>
T number(const std::string& flag, const std::string& value) {
  const std::optional<T> out = cli::parse_number<T>(value);
  if (!out) throw UsageError("bad value for " + flag + ": " + value);
  return *out;
}

/// Whether some rank failed to set up (`error` is this rank's message, empty when it did not); a collective.
/// The lowest failing rank prints its message, prefixed with `program`, before any rank returns (Note [setup
/// errors] in setup.cpp).
bool failed_on_some_rank(const std::string& error, const char* program);

}  // namespace setup
