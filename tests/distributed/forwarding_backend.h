#pragma once
// A backend that hands every op to another (WORLD's, say), for tests that change one thing about a backend: what
// its device check refuses (test_debug.cpp), how long its transfers take (test_pipe_engine.cpp).

#include <memory>
#include <vector>

#include <strata/distributed/process_group.h>

namespace strata::testing {

class ForwardingBackend : public distributed::Backend {
 public:
  using Op = std::shared_ptr<distributed::Work>;
  using ReduceOp = distributed::ReduceOp;
  explicit ForwardingBackend(std::unique_ptr<distributed::Backend> inner) : inner_(std::move(inner)) {}
  DeviceType device_type() const override { return inner_->device_type(); }
  Op all_reduce(const Tensor& t, ReduceOp op, bool a) override { return inner_->all_reduce(t, op, a); }
  Op reduce(const Tensor& t, int root, ReduceOp op, bool a) override { return inner_->reduce(t, root, op, a); }
  Op broadcast(const Tensor& t, int root, bool a) override { return inner_->broadcast(t, root, a); }
  Op all_gather(const Tensor& o, const Tensor& i, bool a) override { return inner_->all_gather(o, i, a); }
  Op reduce_scatter(const Tensor& o, const Tensor& i, ReduceOp op, bool a) override {
    return inner_->reduce_scatter(o, i, op, a);
  }
  Op gather(const Tensor& o, const Tensor& i, int root, bool a) override { return inner_->gather(o, i, root, a); }
  Op scatter(const Tensor& o, const Tensor& i, int root, bool a) override { return inner_->scatter(o, i, root, a); }
  Op all_to_all(const Tensor& o, const Tensor& i, const std::vector<int64_t>& oc, const std::vector<int64_t>& ic,
                bool a) override {
    return inner_->all_to_all(o, i, oc, ic, a);
  }
  Op send(const Tensor& t, int dst, int tag, bool a) override { return inner_->send(t, dst, tag, a); }
  Op recv(const Tensor& t, int src, int tag, bool a) override { return inner_->recv(t, src, tag, a); }
  Op barrier(bool a) override { return inner_->barrier(a); }
  bool receives_post_ahead() const override { return inner_->receives_post_ahead(); }
  std::unique_ptr<distributed::Backend> split(int index) override { return inner_->split(index); }

 protected:
  std::unique_ptr<distributed::Backend> inner_;
};

}  // namespace strata::testing
