#pragma once
// strata::Error and the checks that raise it.
//
//   Tensor a = zeros({3});
//   STRATA_CHECK(a.dim() == 2, "mm: expected a 2-D tensor, got shape ", a.sizes());
//   // throws strata::Error("mm: expected a 2-D tensor, got shape [3] (main.cpp:2)")

#include <sstream>
#include <stdexcept>
#include <string>

namespace strata {

/// The one exception type strata throws for bad input and failed foreign calls.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
/// Formats the message parts and the source location into a strata::Error and throws it.
template <class... Args>
[[noreturn]] void throw_error(const char* file, int line, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  os << " (" << file << ":" << line << ")";
  throw Error(os.str());
}
}  // namespace detail

}  // namespace strata

/// Throws strata::Error built from the message parts when `cond` is false; formats only on failure.
#define STRATA_CHECK(cond, ...)                                       \
  do {                                                                \
    if (!(cond)) [[unlikely]]                                         \
      ::strata::detail::throw_error(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

/// For strata's own invariants: a failure is a bug in strata, not in the caller's input.
#define STRATA_INTERNAL_ASSERT(cond)                                                               \
  do {                                                                                             \
    if (!(cond)) [[unlikely]]                                                                      \
      ::strata::detail::throw_error(__FILE__, __LINE__, "internal error, please report: ", #cond); \
  } while (0)
