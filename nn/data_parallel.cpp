#include "strata/nn/data_parallel.h"

#include <sstream>
#include <utility>
#include <vector>

#include "strata/autograd/grad_mode.h"
#include "strata/distributed/collectives.h"
#include "strata/distributed/grad_reducer.h"
#include "strata/tensor/creation.h"

namespace strata::nn {

namespace dist = strata::distributed;

namespace {

// What every rank's module must agree on, one line per parameter and buffer.
std::vector<std::string> describe(const Module& module) {
  std::vector<std::string> lines;
  auto add = [&](const char* kind, const NamedTensors& list) {
    for (const auto& [name, t] : list) {
      std::ostringstream os;
      // The device type, not the index: ranks sharing a machine hold their replicas on different GPUs.
      os << kind << " " << name << ": " << t.dtype() << " " << t.sizes() << (t.is_cpu() ? "" : " on cuda")
         << (t.requires_grad() ? " requires_grad" : "");
      lines.push_back(os.str());
    }
  };
  add("parameter", module.named_parameters());
  add("buffer", module.named_buffers());
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + '\n';
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) lines.push_back(line);
  return lines;
}

// How this rank's module differs from the root's, or "" when it does not.
std::string difference(const std::vector<std::string>& mine, const std::vector<std::string>& root, int rank,
                       int root_rank) {
  size_t i = 0;
  while (i < mine.size() && i < root.size() && mine[i] == root[i]) ++i;
  std::ostringstream os;
  os << "global rank " << rank;
  if (i < mine.size() && i < root.size())
    os << " has " << mine[i] << " where global rank " << root_rank << " has " << root[i];
  else if (i < mine.size())
    os << " has " << mine[i] << " that global rank " << root_rank << " lacks";
  else if (i < root.size())
    os << " lacks " << root[i] << " that global rank " << root_rank << " has";
  else
    return "";
  return os.str();
}

// Throws the same error on every rank of the group when some rank's parameters or buffers differ from group
// rank 0's (names, dtypes, shapes, requires_grad): differing modules would make differing buckets and hang.
void check_same_modules(const Module& module, const dist::Group& group) {
  const int root = dist::get_global_rank(group, 0);
  const std::vector<std::string> mine = describe(module);
  std::string root_text = join_lines(mine);
  dist::broadcast_object(root_text, root, group);
  std::string diff = difference(mine, split_lines(root_text), dist::get_rank(), root);
  // The first group rank that differs (the group size when none does) tells everyone what it found.
  const int size = dist::get_world_size(group);
  Tensor first = full({1}, diff.empty() ? size : dist::get_rank(group), kLong);
  dist::all_reduce(first, dist::ReduceOp::MIN, group);
  const int first_rank = static_cast<int>(first.item<int64_t>());
  if (first_rank == size) return;
  dist::broadcast_object(diff, dist::get_global_rank(group, first_rank), group);
  STRATA_CHECK(false, "DistributedDataParallel: the modules differ across ", (group ? group->describe() : "WORLD"),
               ": ", diff);
}

}  // namespace

void broadcast_state(const Module& module, const dist::Group& group) {
  STRATA_CHECK(dist::get_rank(group) >= 0, "broadcast_state: this process (global rank ", dist::get_rank(),
               ") is not a member of ", group->describe());
  NoGradGuard no_grad;
  const int root = dist::get_global_rank(group, 0);
  std::vector<std::shared_ptr<dist::Work>> works;
  for (const Tensor& t : module.parameters()) works.push_back(dist::broadcast(t, root, group, /*async_op=*/true));
  for (const Tensor& t : module.buffers()) works.push_back(dist::broadcast(t, root, group, /*async_op=*/true));
  for (const auto& work : works) work->wait();
}

// Note [bucket buffers]: each bucket owns one flat buffer: the gradients of its parameters, one
// after another, then one flag per parameter that says whether the rank has a gradient for it.
// The all_reduce averages both, so a flag above zero afterwards means some rank had a gradient;
// a parameter with none anywhere keeps an undefined grad(), as in torch. After the reduction a
// parameter's grad() is its slice of the buffer, so the next backward accumulates straight into
// it and the copy into the buffer is skipped; a fresh grad() (after zero_grad set it to none) is
// copied in. The passes themselves (hooks, launch order, the end of backward) are dist::GradReducer's.
struct DistributedDataParallel::Reducer {
  struct Param {
    Param(Tensor t, std::string n) : tensor(std::move(t)), name(std::move(n)) {}
    Tensor tensor;
    std::string name;
    size_t slot = 0;  // index within its bucket
    Tensor view;      // its gradient's slice of the bucket buffer, shaped as the parameter
  };
  struct Bucket {
    explicit Bucket(ScalarType d) : dtype(d) {}
    ScalarType dtype;
    int64_t numel = 0;
    std::vector<size_t> params;
    Tensor buffer;  // see Note [bucket buffers]
    Tensor flags;   // the buffer's tail: one flag per parameter
  };

  Reducer(std::shared_ptr<Module> m, DDPOptions options, Device d)
      : module(std::move(m)), group(std::move(options.group)), device(d) {
    for (auto& [name, t] : module->named_parameters())
      if (t.requires_grad()) params.emplace_back(t, name);
    std::vector<Tensor> tensors;
    std::vector<std::string> names;
    for (const Param& p : params) {
      tensors.push_back(p.tensor);
      names.push_back(p.name);
    }
    make_buckets(tensors, options.bucket_cap_mb);
    std::vector<std::vector<size_t>> members;
    for (const Bucket& b : buckets) members.push_back(b.params);
    passes = std::make_unique<dist::GradReducer>(
        "DistributedDataParallel", std::move(tensors), std::move(names), std::move(members),
        dist::GradReducer::Callbacks{.launch = [this](size_t b) { return launch(b); },
                                     .complete = [this](size_t b) { complete(b); }},
        "run that backward under no_sync()");
  }

  // GradReducer::make_buckets's buckets, each with its buffer and its parameters' views.
  void make_buckets(const std::vector<Tensor>& tensors, double cap_mb) {
    for (const std::vector<size_t>& members : dist::GradReducer::make_buckets(tensors, cap_mb)) {
      Bucket& b = buckets.emplace_back(params[members.front()].tensor.dtype());
      b.params = members;
      for (size_t i : members) b.numel += params[i].tensor.numel();
      const int64_t n = static_cast<int64_t>(b.params.size());
      b.buffer = zeros({b.numel + n}, TensorOptions(b.dtype).device(device));
      b.flags = b.buffer.narrow(0, b.numel, n);
      int64_t offset = 0;
      for (size_t slot = 0; slot < b.params.size(); ++slot) {
        Param& p = params[b.params[slot]];
        p.slot = slot;
        p.view = b.buffer.narrow(0, offset, p.tensor.numel()).view(p.tensor.sizes());
        offset += p.tensor.numel();
      }
    }
  }

  // Copies bucket b's gradients into its buffer (zeros where there is none) and starts its all_reduce.
  std::shared_ptr<dist::Work> launch(size_t index) {
    Bucket& b = buckets[index];
    for (size_t i : b.params) {
      Param& p = params[i];
      STRATA_CHECK(p.tensor.dtype() == b.dtype && p.tensor.sizes() == p.view.sizes(),
                   "DistributedDataParallel: ", "parameter ", p.name, " is now ", p.tensor.dtype(), " ",
                   p.tensor.sizes(), " but was ", b.dtype, " ", p.view.sizes(),
                   " when DistributedDataParallel was made; make it after changing the module");
      STRATA_CHECK(p.tensor.device() == device, "DistributedDataParallel: parameter ", p.name, " is now on ",
                   p.tensor.device(), " but was on ", device, " when DistributedDataParallel was made; make it after ",
                   "moving the module");
      const Tensor& grad = p.tensor.grad();
      if (!grad.defined())
        p.view.zero_();
      else if (!is_bucket_view(grad, p))
        p.view.copy_(grad);
      b.flags[static_cast<int64_t>(p.slot)].fill_(grad.defined() ? 1 : 0);
    }
    return dist::all_reduce(b.buffer, dist::ReduceOp::AVG, group, /*async_op=*/true);
  }

  // Hands out bucket b's averages.
  void complete(size_t index) {
    Bucket& b = buckets[index];
    const Tensor flags = b.flags.cpu();  // one copy per bucket: a GPU is waited for once, not per parameter
    for (size_t i : b.params) {
      Param& p = params[i];
      Tensor& grad = p.tensor.mutable_grad();
      if (flags[static_cast<int64_t>(p.slot)].item<double>() > 0 && !is_bucket_view(grad, p)) grad = p.view;
    }
  }

  static bool is_bucket_view(const Tensor& grad, const Param& p) {
    return grad.defined() && grad.is_alias_of(p.view) && grad.storage_offset() == p.view.storage_offset() &&
           grad.is_contiguous() && grad.sizes() == p.view.sizes();
  }

  std::shared_ptr<Module> module;
  dist::Group group;
  Device device;              // of every parameter, so of every bucket
  std::vector<Param> params;  // the parameters that require grad, in registration order
  std::vector<Bucket> buckets;
  std::unique_ptr<dist::GradReducer> passes;  // last: its hooks go first
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module, DDPOptions options) {
  STRATA_CHECK(module, "DistributedDataParallel: the module is null");
  STRATA_CHECK(options.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got ",
               options.bucket_cap_mb);
  STRATA_CHECK(dist::is_initialized(), "DistributedDataParallel: distributed::init() has not been called");
  STRATA_CHECK(dist::get_rank(options.group) >= 0, "DistributedDataParallel: this process (global rank ",
               dist::get_rank(), ") is not a member of ", options.group->describe());
  const Device device = parameters_device(*module, "DistributedDataParallel").value_or(Device(kCPU));
  check_same_modules(*module, options.group);
  broadcast_state(*module, options.group);
  reducer_ = std::make_unique<Reducer>(std::move(module), std::move(options), device);
}

DistributedDataParallel::~DistributedDataParallel() = default;
DistributedDataParallel::DistributedDataParallel(DistributedDataParallel&&) noexcept = default;
DistributedDataParallel& DistributedDataParallel::operator=(DistributedDataParallel&&) noexcept = default;

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { sync_ = previous_; }

DistributedDataParallel::NoSyncGuard DistributedDataParallel::no_sync() {
  Reducer& r = reducer();
  return NoSyncGuard(r.passes->sync, std::exchange(r.passes->sync, false));
}

const std::shared_ptr<Module>& DistributedDataParallel::module() const { return reducer().module; }

std::vector<DDPBucket> DistributedDataParallel::buckets() const {
  const Reducer& r = reducer();
  std::vector<DDPBucket> out;
  for (const auto& b : r.buckets) {
    DDPBucket info{b.dtype, b.numel, {}};
    for (size_t i : b.params) info.parameter_names.push_back(r.params[i].name);
    out.push_back(std::move(info));
  }
  return out;
}

int64_t DistributedDataParallel::buckets_launched() const { return static_cast<int64_t>(reducer().passes->launched()); }

DistributedDataParallel::Reducer& DistributedDataParallel::reducer() const {
  STRATA_CHECK(reducer_, "DistributedDataParallel: used after it was moved from");
  return *reducer_;
}

}  // namespace strata::nn
