#pragma once
// A public header with symbols that lack their /// line: cmake/docs.cmake must fail naming them (the CTest
// api_docs_undocumented).
//
//   strata::nn::documented();

/// A documented namespace, whose undocumented members are reported.
namespace strata::nn {

void documented();  ///< has its line
void undocumented();

}  // namespace strata::nn

namespace strata::nn::hidden {

void inside();  ///< documented, inside a namespace that is not

}  // namespace strata::nn::hidden
