#include "setup.h"

#include <strata/strata.h>

#include <iostream>

namespace setup {

// Note [setup errors]: a bad argument, a world size that --stages does not divide or missing data fail alike
// on every rank (or on some only, such as data missing on one machine). Every rank learns the lowest rank that
// failed; that rank alone says why, and only after it has do the ranks return: mpirun ends the whole job as
// soon as one rank exits non-zero, and might otherwise cut the message. Errors during training propagate
// instead, and strata ends the job naming the rank.
bool failed_on_some_rank(const std::string& error, const char* program) {
  namespace dist = strata::distributed;
  const int rank = dist::get_rank(), world = dist::get_world_size();
  strata::Tensor first_failed = strata::tensor({int64_t{error.empty() ? world : rank}});
  dist::all_reduce(first_failed, dist::ReduceOp::MIN);
  if (first_failed.item<int64_t>() == world) return false;
  if (first_failed.item<int64_t>() == rank) std::cerr << program << ": " << error << std::flush;
  dist::barrier();
  return true;
}

}  // namespace setup
