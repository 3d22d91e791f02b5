#pragma once
// A public header whose opening comment has no usage example: tools/header_examples.py must refuse it
// (the CTest test header_examples_missing).

namespace strata::nn {
void undocumented();  ///< documented, but the header shows no use of it
}  // namespace strata::nn
