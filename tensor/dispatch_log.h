#pragma once
// The dispatch log: which implementation an op chose (a fused kernel, a composite of ops), so that no
// op takes a slower path without a way to see it. Every choice is remembered per thread; when logging
// is on (STRATA_DISPATCH_LOG=1 at start, or set_dispatch_logging(true)) each distinct choice is also
// printed once to stderr as "strata dispatch: OP: PATH".
//
//   set_dispatch_logging(true);
//   log_dispatch("my_op", "fused cpu kernel (Float)");   // printed the first time only
//   std::string path = last_dispatch("my_op");           // "fused cpu kernel (Float)"

#include <string>
#include <string_view>

namespace strata {

/// Turns printing of the dispatch log on or off for every thread.
void set_dispatch_logging(bool on);
/// Whether choices are printed.
bool dispatch_logging();
/// Records that `op` took `path` on this thread; prints it when logging is on and the pair is new.
void log_dispatch(std::string_view op, std::string_view path);
/// The path `op` took last on this thread, or "" when it has not run here.
std::string last_dispatch(std::string_view op);

}  // namespace strata
