// The staged backend: device tensors through a host backend (MPI). What CUDA tensors take when the
// ranks cannot each have a GPU of their own (NCCL refuses two ranks on one GPU; distributed/README.md).
// Each op copies its inputs to host tensors, runs on the host backend and copies the results back:
// a sync op before it returns, an async one in the Work's wait() or the is_completed() that first sees
// it done. Copies to the host wait for the device work that produced the input, and copies back are
// queued on the device's current stream like any other op, so no other synchronisation is needed.
// MPI cannot reduce 16-bit floats, so Half and BFloat16 reductions stage as float32; other ops move
// them as they are.

#include <exception>
#include <functional>
#include <string>
#include <utility>

#include "strata/distributed/detail/cuda_backend.h"
#include "strata/tensor/creation.h"

namespace strata::distributed::detail {

namespace {

const Device kHost(kCPU);

// Finishes a staged async op: the host op's completion, then the copy back.
class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<Work> host, std::function<void()> copy_back)
      : host_(std::move(host)), copy_back_(std::move(copy_back)) {}

  bool is_completed() override {
    if (!done_ && host_->is_completed()) finish();
    return done_;
  }

  void wait() override {
    if (!done_) finish();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void finish() {
    done_ = true;
    try {
      host_->wait();
      if (copy_back_) copy_back_();
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  std::shared_ptr<Work> host_;
  std::function<void()> copy_back_;  // holds the device and host tensors until the result is back
  bool done_ = false;
  std::exception_ptr error_;
};

// The host dtype of a tensor: float32 for a 16-bit float that is reduced.
ScalarType host_dtype(ScalarType t, bool reduces) { return reduces && is_reduced_floating_point(t) ? kFloat : t; }

// A host copy of t (undefined stays undefined).
Tensor stage_in(const Tensor& t, bool reduces = false) {
  return t.defined() ? t.detach().to(kHost, host_dtype(t.dtype(), reduces), /*non_blocking=*/false, /*copy=*/true)
                     : Tensor();
}

// A host tensor to receive t's result (undefined stays undefined).
Tensor host_like(const Tensor& t, bool reduces = false) {
  return t.defined() ? empty(t.sizes(), TensorOptions(host_dtype(t.dtype(), reduces)).device(kHost)) : Tensor();
}

// Copies the host result back into the device tensor (converting a staged 16-bit float back).
auto copy_back(const Tensor& device, const Tensor& host) {
  return [device, host] { device.detach().copy_(host); };
}

class StagedBackend final : public Backend {
 public:
  StagedBackend(std::unique_ptr<Backend> host, DeviceType device_type, int rank)
      : host_(std::move(host)),
        device_type_(device_type),
        name_(std::string(host_->name()) + "+staging"),
        rank_(rank) {}

  const char* name() const override { return name_.c_str(); }
  DeviceType device_type() const override { return device_type_; }
  bool receives_post_ahead() const override { return host_->receives_post_ahead(); }

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op, bool async_op) override {
    Tensor h = stage_in(t, true);
    return finish(async_op, host_->all_reduce(h, op, async_op), copy_back(t, h));
  }

  std::shared_ptr<Work> reduce(const Tensor& t, int root, ReduceOp op, bool async_op) override {
    Tensor h = stage_in(t, true);
    std::function<void()> back;
    if (is_root(root)) back = copy_back(t, h);
    return finish(async_op, host_->reduce(h, root, op, async_op), std::move(back));
  }

  std::shared_ptr<Work> broadcast(const Tensor& t, int root, bool async_op) override {
    const bool root_here = is_root(root);
    Tensor h = root_here ? stage_in(t) : host_like(t);
    std::function<void()> back;
    if (!root_here) back = copy_back(t, h);
    return finish(async_op, host_->broadcast(h, root, async_op), std::move(back));
  }

  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in, bool async_op) override {
    Tensor h_out = host_like(out);
    return finish(async_op, host_->all_gather(h_out, stage_in(in), async_op), copy_back(out, h_out));
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op, bool async_op) override {
    Tensor h_out = host_like(out, true);
    return finish(async_op, host_->reduce_scatter(h_out, stage_in(in, true), op, async_op), copy_back(out, h_out));
  }

  std::shared_ptr<Work> gather(const Tensor& out, const Tensor& in, int root, bool async_op) override {
    Tensor h_out = host_like(out);  // defined on the root only
    std::function<void()> back;
    if (out.defined()) back = copy_back(out, h_out);
    return finish(async_op, host_->gather(h_out, stage_in(in), root, async_op), std::move(back));
  }

  std::shared_ptr<Work> scatter(const Tensor& out, const Tensor& in, int root, bool async_op) override {
    Tensor h_out = host_like(out);
    return finish(async_op, host_->scatter(h_out, stage_in(in), root, async_op), copy_back(out, h_out));
  }

  std::shared_ptr<Work> all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_counts,
                                   const std::vector<int64_t>& in_counts, bool async_op) override {
    Tensor h_out = host_like(out);
    std::shared_ptr<Work> work = host_->all_to_all(h_out, stage_in(in), out_counts, in_counts, async_op);
    return finish(async_op, std::move(work), copy_back(out, h_out));
  }

  std::shared_ptr<Work> send(const Tensor& t, int dst, int tag, bool async_op) override {
    return host_->send(stage_in(t), dst, tag, async_op);  // the host op keeps its buffer alive
  }

  std::shared_ptr<Work> recv(const Tensor& t, int src, int tag, bool async_op) override {
    Tensor h = host_like(t);
    return finish(async_op, host_->recv(h, src, tag, async_op), copy_back(t, h));
  }

  std::shared_ptr<Work> barrier(bool async_op) override { return host_->barrier(async_op); }

  std::unique_ptr<Backend> split(int index) override {
    std::unique_ptr<Backend> sub = host_->split(index);
    if (!sub) return nullptr;
    return std::make_unique<StagedBackend>(std::move(sub), device_type_, index);
  }

 private:
  bool is_root(int root) const { return root == rank_; }

  // A sync op's result goes back now; an async one's when its Work completes.
  static std::shared_ptr<Work> finish(bool async_op, std::shared_ptr<Work> host_work, std::function<void()> back) {
    if (!back) return host_work;
    if (!async_op) {
      back();
      return host_work;
    }
    return std::make_shared<StagedWork>(std::move(host_work), std::move(back));
  }

  std::unique_ptr<Backend> host_;
  DeviceType device_type_;
  std::string name_;
  int rank_;  // this process's group rank
};

}  // namespace

std::unique_ptr<Backend> make_staged_backend(std::unique_ptr<Backend> host, DeviceType device_type, int rank) {
  return std::make_unique<StagedBackend>(std::move(host), device_type, rank);
}

}  // namespace strata::distributed::detail
