#pragma once
// Eigen for the CPU kernels (internal; nothing above tensor/cpu/ includes Eigen).
// GCC 12 reports false (maybe-)uninitialized warnings inside Eigen's AVX-512 intrinsics at the
// places they are inlined, so they are switched off for the files that include this header.

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>
