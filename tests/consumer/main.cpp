// Uses strata as a program outside its tree does (its CMake package, a .deb, pkg-config): the version the
// build system reported (STRATA_EXPECTED_VERSION) is the one in <strata/version.h>, d/dx sum(x^3 + 2 x) is
// 3 x^2 + 2, and an all_reduce in a world of one works (MPI must come along).
#include <strata/strata.h>

#include <cmath>
#include <iostream>
#include <string>

int main() {
  using namespace strata;
  const std::string version = std::to_string(STRATA_VERSION_MAJOR) + "." + std::to_string(STRATA_VERSION_MINOR) + "." +
                              std::to_string(STRATA_VERSION_PATCH);
  if (version != STRATA_VERSION || version != STRATA_EXPECTED_VERSION) {
    std::cerr << "consumer: <strata/version.h> says " << version << " and \"" << STRATA_VERSION
              << "\", the build system " << STRATA_EXPECTED_VERSION << "\n";
    return 1;
  }
  Tensor x = tensor({1.0, 2.0, 3.0}, requires_grad());
  Tensor loss = (x * x * x + x * 2.0).sum();
  loss.backward();

  const double expected[] = {5, 14, 29};
  for (int64_t i = 0; i < 3; ++i) {
    float g = x.grad()[i].item<float>();
    if (std::abs(g - expected[i]) > 1e-5) {
      std::cerr << "consumer: x.grad()[" << i << "] = " << g << ", expected " << expected[i] << "\n";
      return 1;
    }
  }
  distributed::init();
  Tensor sum = x.detach().clone();
  distributed::all_reduce(sum);
  if (distributed::get_world_size() != 1 || sum[2].item<float>() != 3.0f) {
    std::cerr << "consumer: all_reduce in a world of one gave " << sum << "\n";
    return 1;
  }
  std::cout << "consumer: strata " << STRATA_VERSION << ", loss " << loss.item<float>() << ", grad " << x.grad()
            << "\n";
  return 0;
}
