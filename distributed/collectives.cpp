// The front end of the collectives: argument checks, global-to-group ranks, contiguous
// buffers and the profiling switches, around one run() of the group's backend
// (detail/front_end.h). Point to point, objects and monitored_barrier are in p2p.cpp.

#include <algorithm>
#include <atomic>

#include "strata/distributed/detail/front_end.h"
#include "strata/tensor/creation.h"

namespace strata::distributed {

namespace detail {

OpRecord make_record(const char* op, ProcessGroup& g, const Tensor& t, int64_t bytes, bool counted) {
  OpRecord r;
  r.op = op;
  r.group = &g;
  r.seq = counted ? g.next_sequence_number() : 0;
  call_progress.counted += counted;
  r.dtype = t.dtype();
  r.device = t.device().type;
  r.shape = DimVector(t.sizes());
  r.bytes = bytes;
  return r;
}

void check_defined(const Tensor& t, const char* op, const char* what) {
  STRATA_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

// Backends read and write the memory directly, so a contiguous tensor needs no detach (which
// would cost a TensorImpl per call).
Tensor buffer(const Tensor& t) { return t.is_contiguous() ? t : t.detach().contiguous(); }

std::function<void()> copy_back(const Tensor& t, const Tensor& buf) {
  if (buf.impl().storage == t.impl().storage) return {};
  return [t, buf] { t.detach().copy_(buf.view(t.sizes())); };
}

// A group rank from a global rank given as src/dst/peer.
int to_group_rank(const ProcessGroup& g, int global, const char* op, const char* what) {
  const int r = g.group_rank(global);
  STRATA_CHECK(r >= 0, op, ": ", what, " ", global, " is not a member of ", g.describe());
  return r;
}

void check_tag(int tag, const char* op) {
  STRATA_CHECK(tag >= 0 && tag <= kMaxUserTag, op, ": tag ", tag, " is outside 0..", kMaxUserTag);
}

}  // namespace detail

namespace {

using namespace detail;

enum Switch { kAllGatherOff, kReduceScatterOff, kBroadcastOff, kAllReduceOff, kReduceOff, kNumSwitches };
std::atomic<bool> comm_off[kNumSwitches];

bool is_off(Switch s) { return comm_off[s].load(std::memory_order_relaxed); }

// This rank's part in the DETAIL comparison of a call it refused (Note [agreed refusals] in debug.cpp).
void refuse(const char* op, const Group& group, const char* reason, bool counted) {
  try {
    ProcessGroup& g = detail::resolve(group, op);
    detail::OpRecord rec;
    rec.op = op;
    rec.group = &g;
    rec.seq = counted ? g.sequence_number() : g.next_sequence_number();
    refuse_collective(rec, reason);
  } catch (...) {
    // No group to agree with (this process is not a member), or the exchange failed: the caller's error says more.
  }
}

// Runs the collective `body`. Under DETAIL, when it fails before the ranks compared their calls, this rank
// still joins the comparison, so that every rank throws instead of waiting for this one; not while the
// comm-off switch `off` is set (kNumSwitches: none), when no rank communicates.
template <class Body>
std::shared_ptr<Work> agreed(const char* op, const Group& group, Switch off, Body&& body) {
  if (get_debug_level() != DebugLevel::DETAIL) return body();
  const CallProgress before = call_progress;
  try {
    return body();
  } catch (const std::exception& e) {
    if (call_progress.checked == before.checked && (off == kNumSwitches || !is_off(off)))
      refuse(op, group, e.what(), call_progress.counted != before.counted);
    throw;
  }
}

void check_same(const Tensor& t, const Tensor& ref, const char* op, const char* what, size_t i) {
  check_defined(t, op, what);
  STRATA_CHECK(t.dtype() == ref.dtype() && t.device() == ref.device(), op, ": ", what, "[", i, "] is ", t.dtype(),
               " on ", t.device(), " but the tensor is ", ref.dtype(), " on ", ref.device());
  STRATA_CHECK(t.sizes() == ref.sizes(), op, ": ", what, "[", i, "] has shape ", t.sizes(),
               " but the tensor has shape ", ref.sizes());
}

// The output/input pair of one op: both defined, one dtype and one device.
void check_pair(const Tensor& output, const Tensor& input, const char* op) {
  check_defined(output, op, "output");
  check_defined(input, op, "input");
  STRATA_CHECK(output.dtype() == input.dtype() && output.device() == input.device(), op, ": output is ", output.dtype(),
               " on ", output.device(), " but input is ", input.dtype(), " on ", input.device());
}

void check_list(const tensor_list& list, const Tensor& ref, const ProcessGroup& g, const char* op, const char* what) {
  STRATA_CHECK(static_cast<int>(list.size()) == g.size(), op, ": ", what, " has ", list.size(), " tensors but ",
               g.describe(), " has ", g.size(), " ranks");
  for (size_t i = 0; i < list.size(); ++i) check_same(list[i], ref, op, what, i);
}

void check_reduce_op(ReduceOp op, ScalarType t, const char* name) {
  STRATA_CHECK(op != ReduceOp::AVG || is_floating_point(t), name, ": ReduceOp::AVG needs a floating dtype, got ", t);
}

// Copies consecutive slices of `flat` into `outputs` (after a gather-like op).
void unflatten_into(const Tensor& flat, const tensor_list& outputs) {
  int64_t at = 0;
  for (const Tensor& out : outputs) {
    out.detach().copy_(flat.narrow(0, at, out.numel()).view(out.sizes()));
    at += out.numel();
  }
}

// The tensors (a non-empty list of one dtype and device, as the callers check) one after another in one buffer.
Tensor flatten_all(const tensor_list& tensors) {
  int64_t total = 0;
  for (const Tensor& t : tensors) total += t.numel();
  Tensor flat = empty({total}, tensors.front().options());
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    flat.narrow(0, at, t.numel()).copy_(t.detach().reshape({-1}));
    at += t.numel();
  }
  return flat;
}

}  // namespace

std::shared_ptr<Work> detail::broadcast_unswitched(const Tensor& tensor, int src, const Group& group, bool async_op) {
  return agreed("broadcast", group, kNumSwitches, [&] {
    ProcessGroup& g = detail::resolve(group, "broadcast");
    check_defined(tensor, "broadcast", "tensor");
    const int root = to_group_rank(g, src, "broadcast", "src");
    Backend& b = g.backend(tensor.device(), "broadcast");
    detail::OpRecord rec = make_record("broadcast", g, tensor, tensor.nbytes());
    rec.root = root;
    Tensor buf = buffer(tensor);
    return run(
        rec, group, async_op, [&](bool a) { return b.broadcast(buf, root, a); }, copy_back(tensor, buf));
  });
}

// ---- collectives ----

std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op, const Group& group, bool async_op) {
  if (is_off(kAllReduceOff)) {
    detail::resolve(group, "all_reduce");
    check_defined(tensor, "all_reduce", "tensor");
    return completed_work();
  }
  return detail::all_reduce_unswitched(tensor, op, group, async_op);
}

std::shared_ptr<Work> detail::all_reduce_unswitched(const Tensor& tensor, ReduceOp op, const Group& group,
                                                    bool async_op) {
  return agreed("all_reduce", group, kNumSwitches, [&] {
    ProcessGroup& g = detail::resolve(group, "all_reduce");
    check_defined(tensor, "all_reduce", "tensor");
    check_reduce_op(op, tensor.dtype(), "all_reduce");
    Backend& b = g.backend(tensor.device(), "all_reduce");
    detail::OpRecord rec = make_record("all_reduce", g, tensor, tensor.nbytes());
    rec.reduce_op = op;
    Tensor buf = buffer(tensor);
    return run(
        rec, group, async_op, [&](bool a) { return b.all_reduce(buf, op, a); }, copy_back(tensor, buf));
  });
}

std::shared_ptr<Work> reduce(const Tensor& tensor, int dst, ReduceOp op, const Group& group, bool async_op) {
  return agreed("reduce", group, kReduceOff, [&] {
    ProcessGroup& g = detail::resolve(group, "reduce");
    check_defined(tensor, "reduce", "tensor");
    check_reduce_op(op, tensor.dtype(), "reduce");
    const int root = to_group_rank(g, dst, "reduce", "dst");
    if (is_off(kReduceOff)) return completed_work();
    Backend& b = g.backend(tensor.device(), "reduce");
    detail::OpRecord rec = make_record("reduce", g, tensor, tensor.nbytes());
    rec.root = root;
    rec.reduce_op = op;
    Tensor buf = buffer(tensor);
    return run(
        rec, group, async_op, [&](bool a) { return b.reduce(buf, root, op, a); }, copy_back(tensor, buf));
  });
}

std::shared_ptr<Work> broadcast(const Tensor& tensor, int src, const Group& group, bool async_op) {
  if (is_off(kBroadcastOff)) {
    ProcessGroup& g = detail::resolve(group, "broadcast");
    to_group_rank(g, src, "broadcast", "src");
    return completed_work();
  }
  return detail::broadcast_unswitched(tensor, src, group, async_op);
}

std::shared_ptr<Work> all_gather(const tensor_list& tensor_list, const Tensor& tensor, const Group& group,
                                 bool async_op) {
  return agreed("all_gather", group, kAllGatherOff, [&] {
    ProcessGroup& g = detail::resolve(group, "all_gather");
    check_defined(tensor, "all_gather", "tensor");
    check_list(tensor_list, tensor, g, "all_gather", "tensor_list");
    if (is_off(kAllGatherOff)) return completed_work();
    Backend& b = g.backend(tensor.device(), "all_gather");
    detail::OpRecord rec = make_record("all_gather", g, tensor, tensor.nbytes() * g.size());
    Tensor in = buffer(tensor);
    Tensor out = empty({tensor.numel() * g.size()}, tensor.options());
    return run(
        rec, group, async_op, [&](bool a) { return b.all_gather(out, in, a); },
        [tensor_list, out] { unflatten_into(out, tensor_list); });
  });
}

std::shared_ptr<Work> all_gather_into_tensor(const Tensor& output, const Tensor& input, const Group& group,
                                             bool async_op) {
  return agreed("all_gather_into_tensor", group, kAllGatherOff, [&] {
    ProcessGroup& g = detail::resolve(group, "all_gather_into_tensor");
    check_pair(output, input, "all_gather_into_tensor");
    STRATA_CHECK(output.numel() == input.numel() * g.size(), "all_gather_into_tensor: output has ", output.numel(),
                 " elements (shape ", output.sizes(), "), expected ", g.size(), " x ", input.numel(), " (input shape ",
                 input.sizes(), ")");
    if (is_off(kAllGatherOff)) return completed_work();
    Backend& b = g.backend(input.device(), "all_gather_into_tensor");
    detail::OpRecord rec = make_record("all_gather_into_tensor", g, input, output.nbytes());
    Tensor in = buffer(input), out = buffer(output);
    return run(
        rec, group, async_op, [&](bool a) { return b.all_gather(out, in, a); }, copy_back(output, out));
  });
}

std::shared_ptr<Work> reduce_scatter(const Tensor& output, const tensor_list& input_list, ReduceOp op,
                                     const Group& group, bool async_op) {
  return agreed("reduce_scatter", group, kReduceScatterOff, [&] {
    ProcessGroup& g = detail::resolve(group, "reduce_scatter");
    check_defined(output, "reduce_scatter", "output");
    check_list(input_list, output, g, "reduce_scatter", "input_list");
    check_reduce_op(op, output.dtype(), "reduce_scatter");
    if (is_off(kReduceScatterOff)) return completed_work();
    Backend& b = g.backend(output.device(), "reduce_scatter");
    detail::OpRecord rec = make_record("reduce_scatter", g, output, output.nbytes() * g.size());
    rec.reduce_op = op;
    Tensor in = flatten_all(input_list), out = buffer(output);
    return run(
        rec, group, async_op, [&](bool a) { return b.reduce_scatter(out, in, op, a); }, copy_back(output, out));
  });
}

std::shared_ptr<Work> reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op, const Group& group,
                                            bool async_op) {
  return agreed("reduce_scatter_tensor", group, kReduceScatterOff, [&] {
    ProcessGroup& g = detail::resolve(group, "reduce_scatter_tensor");
    check_pair(output, input, "reduce_scatter_tensor");
    STRATA_CHECK(input.numel() == output.numel() * g.size(), "reduce_scatter_tensor: input has ", input.numel(),
                 " elements (shape ", input.sizes(), "), expected ", g.size(), " x ", output.numel(), " (output shape ",
                 output.sizes(), ")");
    check_reduce_op(op, output.dtype(), "reduce_scatter_tensor");
    if (is_off(kReduceScatterOff)) return completed_work();
    Backend& b = g.backend(input.device(), "reduce_scatter_tensor");
    detail::OpRecord rec = make_record("reduce_scatter_tensor", g, input, input.nbytes());
    rec.reduce_op = op;
    Tensor in = buffer(input), out = buffer(output);
    return run(
        rec, group, async_op, [&](bool a) { return b.reduce_scatter(out, in, op, a); }, copy_back(output, out));
  });
}

std::shared_ptr<Work> gather(const Tensor& tensor, const tensor_list& gather_list, int dst, const Group& group,
                             bool async_op) {
  return agreed("gather", group, kNumSwitches, [&] {
    ProcessGroup& g = detail::resolve(group, "gather");
    check_defined(tensor, "gather", "tensor");
    const int root = to_group_rank(g, dst, "gather", "dst");
    const bool is_root = g.rank() == root;
    if (is_root)
      check_list(gather_list, tensor, g, "gather", "gather_list");
    else
      STRATA_CHECK(gather_list.empty(), "gather: gather_list must be empty off the destination (rank ", dst, "), got ",
                   gather_list.size(), " tensors");
    Backend& b = g.backend(tensor.device(), "gather");
    detail::OpRecord rec = make_record("gather", g, tensor, tensor.nbytes() * g.size());
    rec.root = root;
    Tensor in = buffer(tensor);
    Tensor out = is_root ? empty({tensor.numel() * g.size()}, tensor.options()) : Tensor();
    std::function<void()> finish;
    if (is_root) finish = [gather_list, out] { unflatten_into(out, gather_list); };
    return run(
        rec, group, async_op, [&](bool a) { return b.gather(out, in, root, a); }, std::move(finish));
  });
}

std::shared_ptr<Work> scatter(const Tensor& tensor, const tensor_list& scatter_list, int src, const Group& group,
                              bool async_op) {
  return agreed("scatter", group, kNumSwitches, [&] {
    ProcessGroup& g = detail::resolve(group, "scatter");
    check_defined(tensor, "scatter", "tensor");
    const int root = to_group_rank(g, src, "scatter", "src");
    const bool is_root = g.rank() == root;
    if (is_root)
      check_list(scatter_list, tensor, g, "scatter", "scatter_list");
    else
      STRATA_CHECK(scatter_list.empty(), "scatter: scatter_list must be empty off the source (rank ", src, "), got ",
                   scatter_list.size(), " tensors");
    Backend& b = g.backend(tensor.device(), "scatter");
    detail::OpRecord rec = make_record("scatter", g, tensor, tensor.nbytes() * g.size());
    rec.root = root;
    Tensor in = is_root ? flatten_all(scatter_list) : Tensor();
    Tensor out = buffer(tensor);
    return run(
        rec, group, async_op, [&](bool a) { return b.scatter(out, in, root, a); }, copy_back(tensor, out));
  });
}

std::shared_ptr<Work> all_to_all(const tensor_list& output_list, const tensor_list& input_list, const Group& group,
                                 bool async_op) {
  return agreed("all_to_all", group, kNumSwitches, [&] {
    ProcessGroup& g = detail::resolve(group, "all_to_all");
    for (const auto* list : {&output_list, &input_list})
      STRATA_CHECK(static_cast<int>(list->size()) == g.size(),
                   "all_to_all: ", list == &output_list ? "output_list" : "input_list", " has ", list->size(),
                   " tensors but ", g.describe(), " has ", g.size(), " ranks");
    check_defined(input_list[0], "all_to_all", "input_list[0]");
    std::vector<int64_t> out_counts, in_counts;
    int64_t out_bytes = 0, in_bytes = 0;
    for (int p = 0; p < g.size(); ++p) {
      check_defined(output_list[p], "all_to_all", "an output");
      check_defined(input_list[p], "all_to_all", "an input");
      for (const Tensor* t : {&output_list[p], &input_list[p]})
        STRATA_CHECK(t->dtype() == input_list[0].dtype() && t->device() == input_list[0].device(),
                     "all_to_all: every tensor must be ", input_list[0].dtype(), " on ", input_list[0].device(),
                     ", got ", t->dtype(), " on ", t->device(), " for rank ", p);
      out_counts.push_back(output_list[p].numel());
      in_counts.push_back(input_list[p].numel());
      out_bytes += output_list[p].nbytes();
      in_bytes += input_list[p].nbytes();
    }
    Backend& b = g.backend(input_list[0].device(), "all_to_all");
    detail::OpRecord rec = make_record("all_to_all", g, input_list[0], std::max(out_bytes, in_bytes));
    rec.shapes_must_match = false;
    Tensor in = flatten_all(input_list);
    Tensor out = empty({std::max<int64_t>(out_bytes / static_cast<int64_t>(input_list[0].element_size()), 0)},
                       input_list[0].options());
    return run(
        rec, group, async_op, [&](bool a) { return b.all_to_all(out, in, out_counts, in_counts, a); },
        [output_list, out] { unflatten_into(out, output_list); });
  });
}

std::shared_ptr<Work> all_to_all_single(const Tensor& output, const Tensor& input,
                                        const std::vector<int64_t>& output_split_sizes,
                                        const std::vector<int64_t>& input_split_sizes, const Group& group,
                                        bool async_op) {
  return agreed("all_to_all_single", group, kNumSwitches, [&] {
    const char* op = "all_to_all_single";
    ProcessGroup& g = detail::resolve(group, op);
    check_pair(output, input, op);
    STRATA_CHECK(input.dim() >= 1 && output.dim() >= 1, op, ": input and output need at least one dim, got shapes ",
                 input.sizes(), " and ", output.sizes());
    const IntArrayRef row_shape(input.sizes().data() + 1, input.dim() - 1);
    STRATA_CHECK(row_shape == IntArrayRef(output.sizes().data() + 1, output.dim() - 1), op,
                 ": input and output must agree beyond dim 0, got shapes ", input.sizes(), " and ", output.sizes());
    const int64_t row = multiply(row_shape);
    STRATA_CHECK(!output_split_sizes.empty() || !input_split_sizes.empty() || output.size(0) == input.size(0), op,
                 ": without split sizes output and input need the same number of rows, got ", output.size(0), " and ",
                 input.size(0));
    auto counts = [&](const std::vector<int64_t>& splits, const Tensor& t, const char* what) {
      std::vector<int64_t> c(g.size());
      if (splits.empty()) {
        STRATA_CHECK(t.size(0) % g.size() == 0, op, ": ", what, " has ", t.size(0), " rows, not divisible by the ",
                     g.size(), " ranks of ", g.describe(), "; pass split sizes");
        std::fill(c.begin(), c.end(), t.size(0) / g.size() * row);
        return c;
      }
      STRATA_CHECK(static_cast<int>(splits.size()) == g.size(), op, ": ", what, "_split_sizes has ", splits.size(),
                   " entries but ", g.describe(), " has ", g.size(), " ranks");
      int64_t total = 0;
      for (int p = 0; p < g.size(); ++p) {
        STRATA_CHECK(splits[p] >= 0, op, ": ", what, "_split_sizes[", p, "] is negative (", splits[p], ")");
        total += splits[p];
        c[p] = splits[p] * row;
      }
      STRATA_CHECK(total == t.size(0), op, ": ", what, "_split_sizes sum to ", total, " but ", what, " has ", t.size(0),
                   " rows");
      return c;
    };
    std::vector<int64_t> out_counts = counts(output_split_sizes, output, "output");
    std::vector<int64_t> in_counts = counts(input_split_sizes, input, "input");
    Backend& b = g.backend(input.device(), op);
    detail::OpRecord rec = make_record(op, g, input, std::max(input.nbytes(), output.nbytes()));
    rec.shapes_must_match = false;
    Tensor in = buffer(input), out = buffer(output);
    return run(
        rec, group, async_op, [&](bool a) { return b.all_to_all(out, in, out_counts, in_counts, a); },
        copy_back(output, out));
  });
}

std::shared_ptr<Work> barrier(const Group& group, bool async_op) {
  return agreed("barrier", group, kNumSwitches, [&] {
    ProcessGroup& g = detail::resolve(group, "barrier");
    Backend& b = g.backend(kCPU, "barrier");
    detail::OpRecord rec;
    rec.op = "barrier";
    rec.group = &g;
    rec.seq = g.next_sequence_number();
    rec.dtype = kBool;
    return run(rec, group, async_op, [&](bool a) { return b.barrier(a); });
  });
}

std::shared_ptr<Work> all_reduce_coalesced(const tensor_list& tensors, ReduceOp op, const Group& group, bool async_op) {
  return agreed("all_reduce_coalesced", group, kAllReduceOff, [&] {
    ProcessGroup& g = detail::resolve(group, "all_reduce_coalesced");
    STRATA_CHECK(!tensors.empty(), "all_reduce_coalesced: got no tensors");
    for (size_t i = 0; i < tensors.size(); ++i) {
      check_defined(tensors[i], "all_reduce_coalesced", "a tensor");
      STRATA_CHECK(tensors[i].dtype() == tensors[0].dtype() && tensors[i].device() == tensors[0].device(),
                   "all_reduce_coalesced: tensors[", i, "] is ", tensors[i].dtype(), " on ", tensors[i].device(),
                   " but tensors[0] is ", tensors[0].dtype(), " on ", tensors[0].device());
    }
    check_reduce_op(op, tensors[0].dtype(), "all_reduce_coalesced");
    if (is_off(kAllReduceOff)) return completed_work();
    Backend& b = g.backend(tensors[0].device(), "all_reduce_coalesced");
    Tensor flat = flatten_all(tensors);
    detail::OpRecord rec = make_record("all_reduce_coalesced", g, flat, flat.nbytes());
    rec.reduce_op = op;
    return run(
        rec, group, async_op, [&](bool a) { return b.all_reduce(flat, op, a); },
        [tensors, flat] { unflatten_into(flat, tensors); });
  });
}

std::shared_ptr<Work> all_gather_coalesced(const std::vector<tensor_list>& output_lists, const tensor_list& inputs,
                                           const Group& group, bool async_op) {
  return agreed("all_gather_coalesced", group, kAllGatherOff, [&] {
    ProcessGroup& g = detail::resolve(group, "all_gather_coalesced");
    STRATA_CHECK(!inputs.empty(), "all_gather_coalesced: got no input tensors");
    STRATA_CHECK(static_cast<int>(output_lists.size()) == g.size(), "all_gather_coalesced: got ", output_lists.size(),
                 " output lists but ", g.describe(), " has ", g.size(), " ranks");
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_defined(inputs[i], "all_gather_coalesced", "an input");
      STRATA_CHECK(inputs[i].dtype() == inputs[0].dtype() && inputs[i].device() == inputs[0].device(),
                   "all_gather_coalesced: inputs[", i, "] is ", inputs[i].dtype(), " on ", inputs[i].device(),
                   " but inputs[0] is ", inputs[0].dtype(), " on ", inputs[0].device());
    }
    for (const tensor_list& outs : output_lists) {
      STRATA_CHECK(outs.size() == inputs.size(), "all_gather_coalesced: an output list has ", outs.size(),
                   " tensors for ", inputs.size(), " inputs");
      for (size_t i = 0; i < outs.size(); ++i) check_same(outs[i], inputs[i], "all_gather_coalesced", "outputs", i);
    }
    if (is_off(kAllGatherOff)) return completed_work();
    Backend& b = g.backend(inputs[0].device(), "all_gather_coalesced");
    Tensor in = flatten_all(inputs);
    Tensor out = empty({in.numel() * g.size()}, in.options());
    detail::OpRecord rec = make_record("all_gather_coalesced", g, in, out.nbytes());
    tensor_list all_outputs;
    for (const tensor_list& outs : output_lists) all_outputs.insert(all_outputs.end(), outs.begin(), outs.end());
    return run(
        rec, group, async_op, [&](bool a) { return b.all_gather(out, in, a); },
        [all_outputs, out] { unflatten_into(out, all_outputs); });
  });
}

// ---- profiling switches ----

void all_gather_comm_off(bool off) { comm_off[kAllGatherOff] = off; }
void reduce_scatter_comm_off(bool off) { comm_off[kReduceScatterOff] = off; }
void broadcast_comm_off(bool off) { comm_off[kBroadcastOff] = off; }
void all_reduce_comm_off(bool off) { comm_off[kAllReduceOff] = off; }
void reduce_comm_off(bool off) { comm_off[kReduceOff] = off; }
void backward_comm_off(bool off) {
  all_gather_comm_off(off);
  reduce_scatter_comm_off(off);
}

}  // namespace strata::distributed
