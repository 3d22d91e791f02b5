// Uses an installed strata through its CMake package: d/dx sum(x^3 + 2 x) = 3 x^2 + 2, then
// an all_reduce in a world of one (the package must bring MPI along).
#include <strata/strata.h>

#include <cmath>
#include <iostream>

int main() {
  using namespace strata;
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
  std::cout << "consumer: loss " << loss.item<float>() << ", grad " << x.grad() << "\n";
  return 0;
}
