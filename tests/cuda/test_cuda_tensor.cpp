// CUDA tensors themselves: the device API, moving every dtype to the GPU and back (contiguous or
// not, converting on the way), conversions on the GPU bit for bit against the CPU's (ties, subnormals,
// overflow, NaN), item(), printing, copy_ across devices into strided and poisoned outputs, errors
// that name both devices, and the allocator's counters.

#include <bit>
#include <cmath>
#include <limits>
#include <sstream>

#include "parity.h"

using namespace strata;
using strata::testing::gpu;
using strata::testing::indices;
using strata::testing::matches;
using strata::testing::normal;
using strata::testing::same_tensor;
using strata::testing::uniform;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const ScalarType kAllDtypes[] = {kBool, kUInt8, kInt8, kInt16, kInt32, kLong, kFloat, kDouble, kHalf, kBFloat16};

/// A [6, 10] CPU tensor of dtype dt with varied values (converted on the host; the narrower integers wrap).
Tensor sample(ScalarType dt, uint64_t seed) {
  if (dt == kBool) return uniform({6, 10}, -1, 1, kFloat, seed).gt(0.0);
  if (is_integral(dt, false)) return (indices({6, 10}, int64_t{1} << 62, seed) - (int64_t{1} << 61)).to(dt);
  return (normal({6, 10}, kDouble, seed) * 100).to(dt);
}

/// Same dtype, sizes and values bit for bit, except that a NaN matches any NaN: NaN payloads differ between
/// the host's conversions and the GPU's canonical NaN, and nothing may depend on them.
::testing::AssertionResult identical(const Tensor& a, const Tensor& b) {
  if (!a.is_floating_point()) return same_tensor(a, b);
  if (a.dtype() != b.dtype()) return ::testing::AssertionFailure() << "dtype " << a.dtype() << " vs " << b.dtype();
  if (a.sizes() != b.sizes()) return ::testing::AssertionFailure() << "sizes " << a.sizes() << " vs " << b.sizes();
  const std::vector<double> va = strata::testing::values(a), vb = strata::testing::values(b);
  for (size_t i = 0; i < va.size(); ++i) {
    const bool same =
        (std::isnan(va[i]) && std::isnan(vb[i])) || (va[i] == vb[i] && std::signbit(va[i]) == std::signbit(vb[i]));
    if (!same) return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " vs " << vb[i];
  }
  return ::testing::AssertionSuccess();
}

/// Float values that test rounding to the 16-bit types: ties to even, subnormals, overflow, signed zeros, NaN.
Tensor conversion_probes() {
  std::vector<double> v = {0.0,
                           -0.0,
                           1.0,
                           -2.5,
                           kInf,
                           -kInf,
                           kNaN,
                           65504,
                           65519,
                           65520,
                           1e6,
                           -1e6,
                           1 + std::ldexp(1, -11),
                           1 + 3 * std::ldexp(1, -11),
                           std::ldexp(1, -25),
                           3 * std::ldexp(1, -25),
                           std::ldexp(1, -14) - std::ldexp(1, -25),
                           std::ldexp(1, -30),
                           3.3895313892515355e38,
                           std::bit_cast<float>(0x3f808000u),
                           std::bit_cast<float>(0x3f818000u),
                           std::bit_cast<float>(0x00008000u),
                           std::bit_cast<float>(0x7f7f8000u),
                           0.1,
                           1.0 / 3};
  Tensor t = tensor(v, kDouble);
  return cat({t, -t, normal({1000}, kDouble, 3) * 1000, normal({1000}, kDouble, 4) * 1e-6}, 0);
}

TEST(CudaDevice, IsVisibleAndSelectable) {
  STRATA_REQUIRE_CUDA();
  EXPECT_GE(cuda::device_count(), 1);
  EXPECT_EQ(cuda::current_device(), 0);
  cuda::set_device(0);
  cuda::synchronize();
  cuda::synchronize(0);
  EXPECT_THROW(cuda::set_device(cuda::device_count()), Error);
  EXPECT_THROW(zeros({2}, Device(kCUDA, static_cast<int8_t>(cuda::device_count()))), Error);
}

TEST(CudaDevice, FactoriesPutTensorsOnTheGpu) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : kAllDtypes) {
    SCOPED_TRACE(::testing::Message() << dt);
    const TensorOptions on_gpu = TensorOptions(dt).device(gpu());
    const Tensor z = zeros({3, 4}, on_gpu), o = ones({5}, on_gpu), f = full({2, 2}, 1, on_gpu);
    EXPECT_TRUE(z.is_cuda() && !z.is_cpu());
    EXPECT_EQ(z.device(), gpu());
    EXPECT_EQ(z.dtype(), dt);
    EXPECT_TRUE(same_tensor(z.cpu(), zeros({3, 4}, dt)));
    EXPECT_TRUE(same_tensor(o.cpu(), ones({5}, dt)));
    EXPECT_TRUE(same_tensor(f.cpu(), full({2, 2}, 1, dt)));
    EXPECT_TRUE(same_tensor(zeros_like(z).cpu(), zeros({3, 4}, dt)));
    EXPECT_EQ(empty_like(z).device(), gpu());
  }
  EXPECT_TRUE(
      same_tensor(arange(2.0, 9.0, 0.5, TensorOptions(kDouble).device(gpu())).cpu(), arange(2.0, 9.0, 0.5, kDouble)));
  EXPECT_TRUE(same_tensor(arange(10, TensorOptions(kLong).device(gpu())).cpu(), arange(10, kLong)));
  EXPECT_TRUE(same_tensor(eye(4, 3, TensorOptions(kFloat).device(gpu())).cpu(), eye(4, 3)));
  EXPECT_TRUE(same_tensor(full({7}, 0.1, TensorOptions(kHalf).device(gpu())).cpu(), full({7}, 0.1, kHalf)));
}

TEST(CudaDevice, EveryDtypeRoundTripsIncludingNonContiguous) {
  STRATA_REQUIRE_CUDA();
  uint64_t seed = 1;
  for (ScalarType dt : kAllDtypes) {
    SCOPED_TRACE(::testing::Message() << dt);
    const Tensor x = sample(dt, ++seed);
    const Tensor views[] = {x, x.t(), x.slice(1, 1, 10, 3), x.select(0, 2), x.unsqueeze(1).expand({6, 4, 10}), x[1][7]};
    for (const Tensor& v : views) {
      const Tensor g = v.cuda();
      EXPECT_TRUE(g.is_cuda());
      EXPECT_EQ(g.sizes(), v.sizes());
      EXPECT_TRUE(same_tensor(g.cpu(), v.contiguous()));
      EXPECT_TRUE(same_tensor(g.to(Device(kCPU)), v.contiguous()));
      if (v.dim() >= 2) {
        EXPECT_TRUE(same_tensor(g.transpose(0, -1).cpu(), v.transpose(0, -1).contiguous())) << "a view of a GPU tensor";
      }
      EXPECT_TRUE(same_tensor(g.cuda().cpu(), v.contiguous()));  // to(the same device) keeps it there
    }
    const Tensor g = x.cuda();
    EXPECT_TRUE(g.cuda().is_same(g));                                                 // already there: no copy
    EXPECT_FALSE(g.to(gpu(), /*non_blocking=*/false, /*copy=*/true).is_alias_of(g));  // copy=true copies
  }
}

TEST(CudaDevice, ConversionsOnTheGpuMatchTheCpuBitForBit) {
  STRATA_REQUIRE_CUDA();
  const Tensor probes = conversion_probes();
  const Tensor sources[] = {
      probes,           probes.to(kFloat), probes.to(kHalf), probes.to(kBFloat16), sample(kLong, 5),
      sample(kBool, 6), sample(kUInt8, 7), sample(kInt8, 8), sample(kInt16, 9),    sample(kInt32, 10)};
  for (const Tensor& source : sources)
    for (ScalarType to : kAllDtypes) {
      SCOPED_TRACE(::testing::Message() << source.dtype() << " -> " << to);
      Tensor src = source;
      if (is_integral(to, false) && src.is_floating_point()) {
        // NaN, infinities and values beyond int64 convert to different integers on different hardware
        // (undefined in C++ and CUDA alike): only the defined part is compared.
        const Tensor wide = src.to(kDouble);
        src = where(wide.abs().lt(1e15), wide, zeros_like(wide)).to(src.dtype());
      }
      EXPECT_TRUE(identical(src.cuda().to(to).cpu(), src.to(to)));          // converted on the GPU
      EXPECT_TRUE(identical(src.to(gpu(), to).cpu(), src.to(to)));          // converted while moving
      EXPECT_TRUE(identical(src.cuda().to(Device(kCPU), to), src.to(to)));  // moved back converting
      // A strided view of GPU memory converted on the GPU.
      EXPECT_TRUE(
          identical(src.cuda().slice(0, 0, src.size(0), 3).to(to).cpu(), src.slice(0, 0, src.size(0), 3).to(to)));
    }
}

TEST(CudaDevice, ItemCopiesTheValueBack) {
  STRATA_REQUIRE_CUDA();
  const Tensor x = uniform({100, 100}, -1, 1);
  EXPECT_NEAR(sum(x.cuda()).item<double>(), sum(x).item<double>(), 1e-3);
  EXPECT_EQ(x.cuda()[3][4].item<float>(), x[3][4].item<float>());
  EXPECT_EQ(tensor({int64_t{1} << 60}).cuda().item<int64_t>(), int64_t{1} << 60);
  EXPECT_EQ(full({1}, 0.1, TensorOptions(kBFloat16).device(gpu())).item<float>(), static_cast<float>(BFloat16(0.1f)));
  EXPECT_TRUE(tensor({true}).cuda().item<bool>());
  EXPECT_THROW(x.cuda().item<float>(), Error);
}

TEST(CudaDevice, PrintingNamesTheDeviceAndShowsTheValues) {
  STRATA_REQUIRE_CUDA();
  const Tensor x = tensor({1.5, -2.0, 3.25});
  std::ostringstream cpu_text, gpu_text, grad_text, half_text;
  cpu_text << x;
  gpu_text << x.cuda();
  EXPECT_NE(gpu_text.str().find("device='cuda:0'"), std::string::npos) << gpu_text.str();
  // The CPU text with the device added before the closing parenthesis.
  const std::string c = cpu_text.str();
  EXPECT_EQ(gpu_text.str(), c.substr(0, c.size() - 1) + ", device='cuda:0')");
  grad_text << x.cuda().requires_grad_(true);
  EXPECT_NE(grad_text.str().find("requires_grad=True"), std::string::npos) << grad_text.str();
  half_text << x.to(gpu(), kHalf).t();
  EXPECT_NE(half_text.str().find("-2"), std::string::npos) << half_text.str();
  EXPECT_NE(half_text.str().find("dtype=Half"), std::string::npos) << half_text.str();
}

TEST(CudaDevice, CopyAcrossDevicesIntoStridedPoisonedOutputs) {
  STRATA_REQUIRE_CUDA();
  const Tensor src = uniform({5, 7}, -3, 3, kDouble);
  // CPU -> GPU into a transposed view of a NaN-filled base: every element of the view is written, nothing else.
  Tensor base = full({9, 5}, kNaN, TensorOptions(kFloat).device(gpu()));
  base.slice(0, 1, 8).t().copy_(src);
  Tensor expected = full({9, 5}, kNaN, kFloat);
  expected.slice(0, 1, 8).t().copy_(src);
  const Tensor got = base.cpu();
  EXPECT_TRUE(identical(got.slice(0, 1, 8), expected.slice(0, 1, 8).contiguous()));
  for (double v : strata::testing::values(cat({got.select(0, 0), got.select(0, 8)}))) EXPECT_TRUE(std::isnan(v));
  // GPU -> CPU into a strided host view, converting, and broadcasting a row.
  Tensor host = full({5, 14}, kNaN, kDouble);
  host.slice(1, 0, 14, 2).copy_(src.to(gpu(), kHalf));
  EXPECT_TRUE(identical(host.slice(1, 0, 14, 2).contiguous(), src.to(kHalf).to(kDouble)));
  EXPECT_TRUE(std::isnan(host[0][1].item<double>()));
  Tensor rows = full({4, 7}, kNaN, TensorOptions(kDouble).device(gpu()));
  rows.copy_(src[2]);
  EXPECT_TRUE(identical(rows.cpu(), src[2].expand({4, 7}).contiguous()));
  // GPU -> GPU between dtypes and layouts.
  Tensor dst = full({7, 5}, kNaN, TensorOptions(kBFloat16).device(gpu()));
  dst.copy_(src.cuda().t());
  EXPECT_TRUE(identical(dst.cpu(), src.t().to(kBFloat16)));
  EXPECT_GT(dst._version(), 0u);
}

TEST(CudaDevice, OpsMixingDevicesNameBothDevices) {
  STRATA_REQUIRE_CUDA();
  const Tensor c = uniform({3, 3}, -1, 1), g = c.cuda();
  for (const auto& [name, op] : std::vector<std::pair<const char*, std::function<void()>>>{
           {"add", [&] { (void)(c + g); }},
           {"mul", [&] { (void)(g * c); }},
           {"maximum", [&] { (void)maximum(g, c); }},
           {"matmul", [&] { (void)matmul(c, g); }},
           {"where", [&] { (void)where(c.gt(0.0), g, g); }},
           {"cat",
            [&] {
              (void)cat({g, c});
            }},
           {"add_",
            [&] {
              Tensor t = g.clone();
              t.add_(c);
            }},
           {"mul_",
            [&] {
              Tensor t = g.clone();
              t.mul_(c);
            }},
           {"div_ into cpu",
            [&] {
              Tensor t = c.clone();
              t.div_(g);
            }},
       }) {
    SCOPED_TRACE(name);
    try {
      op();
      ADD_FAILURE() << "mixing cpu and cuda:0 did not throw";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("cpu"), std::string::npos) << what;
      EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
    }
  }
  EXPECT_THROW((void)index_select(g, 0, tensor({0, 1})), Error);
  EXPECT_THROW((void)cross_entropy(g, tensor({0, 1, 2})), Error);
}

// The kernel tables check devices too: a CUDA kernel handed a host pointer would fault the context
// and every later call with it, so an op that forgot its own check still gets an error.
TEST(CudaDevice, KernelsRefuseOperandsOnAnotherDevice) {
  STRATA_REQUIRE_CUDA();
  const Tensor g = uniform({3, 4}, -1, 1).cuda();
  const Kernels& k = kernels_for(g.device());
  const auto expect_named = [](const std::function<void()>& call) {
    try {
      call();
      ADD_FAILURE() << "a kernel took an operand on the cpu";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
    }
  };
  expect_named([&] { k.binary(BinaryOp::Add, g, g, empty({3, 4})); });
  expect_named([&] { k.reduce(ReduceKind::Sum, g, IntArrayRef(int64_t{1}), empty({3, 1})); });
  expect_named([&] { k.arg_reduce(ReduceKind::Max, g, 1, empty({3, 1}, g.options()), empty({3, 1}, kLong)); });
  expect_named([&] { k.gather(g, 1, zeros({3, 2}, kLong), empty({3, 2}, g.options())); });
  cuda::synchronize();  // nothing was launched: the context is still good
  EXPECT_TRUE(matches(argmax(g, 1), argmax(g.cpu(), 1)));
}

TEST(CudaDevice, AllocatorCountsLiveTensors) {
  STRATA_REQUIRE_CUDA();
  cuda::synchronize();
  const int64_t before = cuda::memory_allocated();
  {
    const Tensor big = empty({int64_t{64} << 20}, TensorOptions(kFloat).device(gpu()));  // 256 MiB
    EXPECT_GE(cuda::memory_allocated() - before, int64_t{256} << 20);
    EXPECT_GE(cuda::memory_reserved(), cuda::memory_allocated());
    EXPECT_EQ(cuda::memory_allocated(0), cuda::memory_allocated());
  }
  cuda::synchronize();
  EXPECT_EQ(cuda::memory_allocated(), before);
  // A training-like loop reuses memory: the reserved total stops growing.
  const Tensor w = normal({512, 512}).cuda();
  for (int i = 0; i < 3; ++i) (void)relu(w.matmul(w)).sum().item<float>();
  const int64_t reserved = cuda::memory_reserved();
  for (int i = 0; i < 20; ++i) (void)relu(w.matmul(w)).sum().item<float>();
  EXPECT_EQ(cuda::memory_reserved(), reserved);
}

}  // namespace
