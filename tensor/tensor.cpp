#include "strata/tensor/tensor.h"

#include <iomanip>
#include <sstream>

#include "strata/tensor/kernels.h"

namespace strata {

const char* to_string(ScalarType t) {
  switch (t) {
    case kBool:
      return "Bool";
    case kLong:
      return "Long";
    case kFloat:
      return "Float";
    case kDouble:
      return "Double";
    case kHalf:
      return "Half";
    case kBFloat16:
      return "BFloat16";
    case kByte:
      return "Byte";
    case kChar:
      return "Char";
    case kShort:
      return "Short";
    case kInt:
      return "Int";
  }
  return "Unknown";
}

std::ostream& operator<<(std::ostream& os, ScalarType t) { return os << to_string(t); }

std::ostream& operator<<(std::ostream& os, Device d) {
  if (d.is_cpu()) return os << "cpu";
  return os << "cuda:" << int(d.index);
}

int64_t Tensor::size(int64_t d) const {
  STRATA_CHECK(dim() > 0, "size: dimension specified as ", d, " but tensor has no dimensions");
  return impl().sizes[wrap_dim(d, dim(), "size")];
}

int64_t Tensor::stride(int64_t d) const {
  STRATA_CHECK(dim() > 0, "stride: dimension specified as ", d, " but tensor has no dimensions");
  return impl().strides[wrap_dim(d, dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  const TensorImpl& t = impl();
  int64_t expected = 1;
  for (size_t i = t.sizes.size(); i-- > 0;) {
    if (t.sizes[i] == 1) continue;  // any stride is fine for a size-1 dim
    if (t.strides[i] != expected) return t.numel == 0;
    expected *= t.sizes[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const TensorImpl& t = impl();
  return static_cast<char*>(t.storage->data) + t.offset * static_cast<int64_t>(strata::element_size(t.dtype));
}

Tensor make_view(const Tensor& base, IntArrayRef sizes, IntArrayRef strides, int64_t offset) {
  STRATA_INTERNAL_ASSERT(sizes.size() == strides.size());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl().storage;
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->numel = multiply(sizes);
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

Scalar Tensor::item() const {
  if (is_floating_point()) return item<double>();
  if (dtype() == kBool) return item<bool>();
  return item<int64_t>();
}

namespace {

// Prints the element at storage offset off: bools as True/False, 16-bit floats and 1-byte integers as numbers.
void print_element(std::ostream& os, const Tensor& t, int64_t off) {
  visit_all_dtypes(t.dtype(), [&]<class T>() {
    const T v = static_cast<const T*>(t.impl().storage->data)[off];
    if constexpr (std::is_same_v<T, bool>)
      os << (v ? "True" : "False");
    else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      os << static_cast<float>(v);
    else if constexpr (sizeof(T) == 1)
      os << static_cast<int>(v);
    else
      os << v;
  });
}

// Prints dims recursively, eliding the middle of long dims as PyTorch does.
void print_dim(std::ostream& os, const Tensor& t, int64_t d, int64_t offset, bool summarize, int indent) {
  const int64_t n = t.size(d);
  const int64_t edge = 3;
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * edge && i == edge) {
      os << "...";
      i = n - edge - 1;
      if (d + 1 == t.dim())
        os << ", ";
      else
        os << ",\n" << std::string(indent + 1, ' ');
      continue;
    }
    const int64_t off = offset + i * t.stride(d);
    if (d + 1 == t.dim()) {
      print_element(os, t, off);
    } else {
      print_dim(os, t, d + 1, off, summarize, indent + 1);
    }
    if (i + 1 < n) {
      if (d + 1 == t.dim())
        os << ", ";
      else
        os << ",\n" << std::string(indent + 1, ' ');
    }
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  if (!t.is_cpu()) {  // printed from a host copy, as libtorch does, with the device named
    const Tensor host = make_view(t, t.sizes(), t.strides(), t.storage_offset()).to(Device(kCPU));
    std::ostringstream text;
    text << host;
    std::string s = text.str();
    os << s.substr(0, s.size() - 1) << ", device='" << t.device() << "'";
    if (t.requires_grad()) os << ", requires_grad=True";
    return os << ')';
  }
  os << "tensor(";
  if (t.dim() == 0) {
    print_element(os, t, t.storage_offset());
  } else {
    print_dim(os, t, 0, t.storage_offset(), t.numel() > 1000, 7);
  }
  os << ", dtype=" << t.dtype();
  if (t.requires_grad()) os << ", requires_grad=True";
  return os << ')';
}

const char* to_string(UnaryOp op) {
  static constexpr const char* kNames[] = {"neg", "exp",         "log",     "sqrt",      "rsqrt",
                                           "abs", "tanh",        "sigmoid", "relu",      "sign",
                                           "erf", "logical_not", "gelu",    "gelu_tanh", "bitwise_not"};
  return kNames[static_cast<int>(op)];
}

const char* to_string(BinaryOp op) {
  static constexpr const char* kNames[] = {"add",
                                           "sub",
                                           "mul",
                                           "div",
                                           "pow",
                                           "maximum",
                                           "minimum",
                                           "eq",
                                           "ne",
                                           "lt",
                                           "le",
                                           "gt",
                                           "ge",
                                           "logical_and",
                                           "logical_or",
                                           "gelu_backward",
                                           "gelu_tanh_backward",
                                           "relu_backward",
                                           "bitwise_and",
                                           "bitwise_or",
                                           "bitwise_xor"};
  return kNames[static_cast<int>(op)];
}

const char* to_string(ReduceKind op) {
  static constexpr const char* kNames[] = {"sum", "prod", "max", "min"};
  return kNames[static_cast<int>(op)];
}

const Kernels& kernels_for(Device device) { return device.is_cpu() ? cpu_kernels() : cuda_kernels(); }

}  // namespace strata
