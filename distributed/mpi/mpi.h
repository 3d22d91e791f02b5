#pragma once
// Internal: the MPI headers and the MPI status checker. Only files under distributed/ include it.

#include <mpi.h>

#include <memory>

#include "strata/distributed/process_group.h"

namespace strata::distributed::mpi {

/// Throws strata::Error naming `what` and MPI's message for `code` unless it is MPI_SUCCESS.
#define STRATA_MPI_CHECK(call, what)                                                           \
  do {                                                                                         \
    const int strata_mpi_code_ = (call);                                                       \
    if (strata_mpi_code_ != MPI_SUCCESS) [[unlikely]]                                          \
      ::strata::distributed::mpi::throw_mpi_error(__FILE__, __LINE__, what, strata_mpi_code_); \
  } while (0)

/// Formats MPI's error string for `code` into a strata::Error.
[[noreturn]] void throw_mpi_error(const char* file, int line, const char* what, int code);

/// The MPI datatype of a strata dtype (Half and BFloat16 as MPI_UINT16_T: moved, never reduced).
MPI_Datatype datatype(ScalarType t);

/// A backend over `comm`, which it owns (and frees).
std::unique_ptr<Backend> make_backend(MPI_Comm comm);

}  // namespace strata::distributed::mpi
