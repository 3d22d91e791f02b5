#include "strata/nn/data_parallel.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "strata/autograd/engine.h"
#include "strata/autograd/grad_mode.h"
#include "strata/distributed/collectives.h"
#include "strata/tensor/creation.h"

namespace strata::nn {

namespace dist = strata::distributed;

namespace {

constexpr double kFirstBucketCapMb = 1;  // torch's _DEFAULT_FIRST_BUCKET_BYTES
constexpr double kBytesPerMb = 1024.0 * 1024.0;

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
// copied in.
struct DistributedDataParallel::Reducer {
  struct Param {
    Param(Tensor t, std::string n) : tensor(std::move(t)), name(std::move(n)) {}
    Tensor tensor;
    std::string name;
    size_t bucket = 0;
    size_t slot = 0;  // index within its bucket
    Tensor view;      // its gradient's slice of the bucket buffer, shaped as the parameter
    unsigned hook = 0;
    bool ready = false;  // accumulated in the running backward
  };
  struct Bucket {
    explicit Bucket(ScalarType d) : dtype(d) {}
    ScalarType dtype;
    int64_t numel = 0;
    std::vector<size_t> params;
    Tensor buffer;  // see Note [bucket buffers]
    Tensor flags;   // the buffer's tail: one flag per parameter
    size_t pending = 0;
    std::shared_ptr<dist::Work> work;
  };

  Reducer(std::shared_ptr<Module> m, DDPOptions options, Device d)
      : module(std::move(m)), group(std::move(options.group)), device(d) {
    for (auto& [name, t] : module->named_parameters())
      if (t.requires_grad()) params.emplace_back(t, name);
    make_buckets(options.bucket_cap_mb);
    for (size_t i = 0; i < params.size(); ++i)
      params[i].hook = params[i].tensor.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_grad(i); });
  }

  ~Reducer() {
    for (Param& p : params) p.tensor.remove_post_accumulate_grad_hook(p.hook);
  }

  // Parameters in reverse registration order, one open bucket per dtype, closed before it would pass the cap
  // (the first one of a dtype at most kFirstBucketCapMb). Buckets are numbered as they open.
  void make_buckets(double cap_mb) {
    struct Open {
      size_t index;
      int64_t bytes;
      bool first;
    };
    std::map<ScalarType, Open> open;
    for (size_t i = params.size(); i-- > 0;) {
      Param& p = params[i];
      const ScalarType dtype = p.tensor.dtype();
      const auto bytes = static_cast<int64_t>(p.tensor.nbytes());
      auto it = open.find(dtype);
      const bool full =
          it != open.end() && static_cast<double>(it->second.bytes + bytes) >
                                  (it->second.first ? std::min(cap_mb, kFirstBucketCapMb) : cap_mb) * kBytesPerMb;
      if (it == open.end() || full) {
        open.insert_or_assign(dtype, Open{buckets.size(), 0, it == open.end()});
        buckets.emplace_back(dtype);
      }
      Open& o = open.at(dtype);
      Bucket& b = buckets[o.index];
      p.bucket = o.index;
      p.slot = b.params.size();
      b.params.push_back(i);
      b.numel += p.tensor.numel();
      o.bytes += bytes;
    }
    for (Bucket& b : buckets) {
      const int64_t n = static_cast<int64_t>(b.params.size());
      b.buffer = zeros({b.numel + n}, TensorOptions(b.dtype).device(device));
      b.flags = b.buffer.narrow(0, b.numel, n);
      int64_t offset = 0;
      for (size_t i : b.params) {
        Param& p = params[i];
        p.view = b.buffer.narrow(0, offset, p.tensor.numel()).view(p.tensor.sizes());
        offset += p.tensor.numel();
      }
    }
  }

  // The post-accumulate hook of parameter i.
  void on_grad(size_t i) {
    if (!sync) return;
    if (pass_alive.expired()) begin_pass();
    Param& p = params[i];
    STRATA_CHECK(!p.ready, "DistributedDataParallel: parameter ", p.name,
                 " got a second gradient in one backward (a backward started from a hook?)");
    p.ready = true;
    if (--buckets[p.bucket].pending == 0)
      while (launched < buckets.size() && buckets[launched].pending == 0) launch_next();
  }

  // The first gradient of a synchronized backward: resets the counts and queues finish() for the pass's end.
  void begin_pass() {
    if (pass_open) abandon_pass();
    STRATA_CHECK(!GradMode::is_enabled(), "DistributedDataParallel: backward with create_graph is not supported (the ",
                 "averaged gradients would have no history); run that backward under no_sync()");
    for (Param& p : params) p.ready = false;
    for (Bucket& b : buckets) b.pending = b.params.size();
    launched = 0;
    auto alive = std::make_shared<char>();
    pass_alive = alive;
    autograd::queue_callback([this, alive] { finish(); });
    pass_open = true;
  }

  // Note [abandoned pass]: a backward that threw part-way, finish() included, left pass_open set:
  // some all_reduces may be in flight and grad() holds local gradients. The next backward notices
  // (the queued callback died with the pass), waits for the started all_reduces (ranks that failed alike
  // started the same ones) so no buffer is written behind its back, and throws.
  void abandon_pass() {
    pass_open = false;
    for (size_t b = 0; b < launched; ++b) buckets[b].work->wait();
    STRATA_CHECK(false, "DistributedDataParallel: the previous backward stopped (threw) before its gradients were ",
                 "averaged, so grad() holds this rank's own gradients; zero the gradients and redo the step on ",
                 "every rank");
  }

  // Copies bucket `launched`'s gradients into its buffer (zeros where there is none) and starts its all_reduce.
  // `launched` counts it only once its work exists: abandon_pass() waits for exactly those.
  void launch_next() {
    Bucket& b = buckets[launched];
    NoGradGuard no_grad;
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
    b.work = dist::all_reduce(b.buffer, dist::ReduceOp::AVG, group, /*async_op=*/true);
    ++launched;
  }

  // The queued callback: starts what no gradient started, waits for every bucket and hands out the averages.
  // The pass stays open until the end, so that a throw here leaves the next backward to abandon it.
  void finish() {
    while (launched < buckets.size()) launch_next();
    for (Bucket& b : buckets) {
      b.work->wait();
      const Tensor flags = b.flags.cpu();  // one copy per bucket: a GPU is waited for once, not per parameter
      for (size_t i : b.params) {
        Param& p = params[i];
        Tensor& grad = p.tensor.mutable_grad();
        if (flags[static_cast<int64_t>(p.slot)].item<double>() > 0 && !is_bucket_view(grad, p)) grad = p.view;
      }
    }
    pass_open = false;
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
  bool sync = true;                // false under no_sync()
  bool pass_open = false;          // a synchronized backward started and its finish() has not run
  std::weak_ptr<void> pass_alive;  // expires with the queued finish(), run or dropped with a failed pass
  size_t launched = 0;             // buckets started in this pass; they start in index order
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
  return NoSyncGuard(r.sync, std::exchange(r.sync, false));
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

int64_t DistributedDataParallel::buckets_launched() const { return static_cast<int64_t>(reducer().launched); }

DistributedDataParallel::Reducer& DistributedDataParallel::reducer() const {
  STRATA_CHECK(reducer_, "DistributedDataParallel: used after it was moved from");
  return *reducer_;
}

}  // namespace strata::nn
