#pragma once
// c10d's Work: the handle of an op a ProcessGroup started, as libtorch's c10d::Work. strata holds it by
// std::shared_ptr, as libtorch did up to 1.6 and pytorch/examples' dist-mnist.cpp spells it; libtorch 1.7 and
// later spell the same handle c10::intrusive_ptr<Work> (write std::shared_ptr, or auto, when porting).
//
//   auto pg = strata::c10d::ProcessGroupMPI::createProcessGroupMPI();
//   std::vector<strata::Tensor> tensors = {strata::ones({4})};
//   std::shared_ptr<strata::c10d::Work> work = pg->allreduce(tensors);
//   work->wait();                                     // throws the op's error
//   if (work->isCompleted() && work->isSuccess()) std::cout << "done\n";

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "strata/c10d/Types.hpp"

namespace strata::c10d {

/// The handle of one op of a ProcessGroup, as c10d::Work: wait for it, poll it, or read its error.
class Work {
 public:
  /// Over strata's handle of the op; `outputs` are what result() returns, `source` the group rank a recv names.
  Work(std::shared_ptr<distributed::Work> work, std::vector<Tensor> outputs, int source = -1);
  virtual ~Work() = default;
  /// True once the op has finished, with or without an error; never blocks.
  bool isCompleted();
  /// True once the op has finished without an error (false until then).
  bool isSuccess() const;
  /// The op's error once it has finished with one, else null.
  std::exception_ptr exception() const;
  /// The group rank a recv received from; an error for other ops.
  int sourceRank() const;
  /// The op's output tensors (those it wrote; empty for send and barrier).
  std::vector<Tensor> result();
  /// Finishes the op (on NCCL the current stream waits instead of the host) and throws its error, as wait().
  void synchronize();
  /// Finishes the op, throws its error, and returns true. With a positive timeout it throws strata::Error when the
  /// op has not finished by then (the op goes on; wait again or abort the job).
  bool wait(std::chrono::milliseconds timeout = kNoTimeout);

 private:
  /// Once the op is complete, records its outcome (error_) the first time; returns whether it is complete.
  bool settle(bool block) const;
  std::shared_ptr<distributed::Work> work_;
  std::vector<Tensor> outputs_;
  int source_;
  mutable std::mutex mutex_;
  mutable bool settled_ = false;
  mutable std::exception_ptr error_;
};

}  // namespace strata::c10d
