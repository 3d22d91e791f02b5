#pragma once
// strata::Error and the checks that raise it.
//
//   Tensor a = zeros({3});
//   STRATA_CHECK(a.dim() == 2, "mm: expected a 2-D tensor, got shape ", a.sizes());
//   // throws strata::Error("mm: expected a 2-D tensor, got shape [3] (main.cpp:2)")
//   STRATA_CHECK(a.numel() == 4);   // throws "Expected a.numel() == 4 to be true, but got false (main.cpp:4)
//   std::string name = strata::str("sample-", 3, ".pt");   // "sample-3.pt", as c10::str

#include <sstream>
#include <stdexcept>
#include <string>

namespace strata {

/// The one exception type strata throws for bad input and failed foreign calls.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The arguments streamed into one string, as c10::str: str("sample-", 3, ".pt") is "sample-3.pt".
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

namespace detail {
/// Formats the message parts and the source location into a strata::Error and throws it.
template <class... Args>
[[noreturn]] void throw_error(const char* file, int line, const Args&... args) {
  throw Error(str(args..., " (", file, ":", line, ")"));
}
/// throw_error with the message parts, or, when there are none, one naming the failed condition (as TORCH_CHECK).
template <class... Args>
[[noreturn]] void throw_check(const char* file, int line, const char* condition, const Args&... args) {
  if constexpr (sizeof...(Args) == 0)
    throw_error(file, line, "Expected ", condition, " to be true, but got false");
  else
    throw_error(file, line, args...);
}
}  // namespace detail

}  // namespace strata

/// Throws strata::Error built from the message parts when `cond` is false (without parts, a message naming
/// `cond`); formats only on failure.
#define STRATA_CHECK(cond, ...)                                                            \
  do {                                                                                     \
    if (!(cond)) [[unlikely]]                                                              \
      ::strata::detail::throw_check(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

/// For strata's own invariants: a failure is a bug in strata, not in the caller's input.
#define STRATA_INTERNAL_ASSERT(cond)                                                               \
  do {                                                                                             \
    if (!(cond)) [[unlikely]]                                                                      \
      ::strata::detail::throw_error(__FILE__, __LINE__, "internal error, please report: ", #cond); \
  } while (0)
