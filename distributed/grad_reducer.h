#pragma once
// What data-parallel gradient reduction shares: one collective per bucket of parameters, started as soon as
// backward has accumulated the bucket's last gradient, in bucket order on every rank, and finished at the end of
// backward. nn::DistributedDataParallel (an all-reduce per bucket) and optim::ZeroRedundancyOptimizer at stage 2
// (a reduce-scatter per bucket) say what a bucket's collective is.
//
//   nn::Linear model(4, 2);
//   std::vector<Tensor> params = model->parameters();      // weight, bias
//   Tensor flat = zeros({10});
//   std::shared_ptr<distributed::Work> work;
//   distributed::GradReducer reducer("Example", params, {"weight", "bias"}, {{1, 0}},
//       {.launch = [&](size_t) {                            // backward accumulated bias and weight
//          flat.narrow(0, 0, 2).copy_(params[1].grad());
//          flat.narrow(0, 2, 8).copy_(params[0].grad().flatten());
//          return work = distributed::all_reduce(flat, distributed::ReduceOp::AVG, {}, /*async_op=*/true);
//        },
//        .complete = [&](size_t) { /* flat holds the average over the ranks */ }},
//       "reduce by hand");
//   model(randn({3, 4})).sum().backward();                  // every rank of the group runs it

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strata/distributed/process_group.h"
#include "strata/tensor/tensor.h"

namespace strata::distributed {

/// Starts a collective per bucket of gradients while backward runs and finishes them at its end (see above).
class GradReducer {
 public:
  /// What reducing a bucket means.
  struct Callbacks {
    /// Copies bucket b's gradients out (a parameter with none counts as zeros) and starts its collective.
    std::function<std::shared_ptr<Work>(size_t b)> launch;
    /// At the end of backward, after bucket b's collective was waited for; called in bucket order.
    std::function<void(size_t b)> complete;
  };

  /// Hooks every parameter; buckets[b] lists the numbers of bucket b's parameters (each in one bucket), and
  /// buckets launch in index order once all their parameters are ready. `who` starts error messages, names[i]
  /// names parameter i in them, and `create_graph_remedy` says what to do instead of a backward with create_graph.
  GradReducer(std::string who, std::vector<Tensor> params, std::vector<std::string> names,
              std::vector<std::vector<size_t>> buckets, Callbacks callbacks, std::string create_graph_remedy);
  ~GradReducer();  ///< removes the hooks
  /// Buckets as DistributedDataParallel makes them: the parameters in reverse order (roughly the order backward
  /// finishes them), one open bucket per (dtype, keys[i]), closed before it would pass cap_mb MiB (the first of
  /// each at most 1 MiB, as torch, so that communication starts early); numbered as they open. No keys: all 0.
  static std::vector<std::vector<size_t>> make_buckets(const std::vector<Tensor>& params, double cap_mb,
                                                       const std::vector<size_t>& keys = {});
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  bool sync = true;                              ///< false: backward accumulates locally (no_sync)
  size_t launched() const { return launched_; }  ///< buckets the running (or last) backward has started

 private:
  void on_grad(size_t i);
  void begin_pass();
  void abandon_pass();
  void launch_next();
  void finish();

  std::string who_, create_graph_remedy_;
  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<std::vector<size_t>> buckets_;
  Callbacks callbacks_;
  std::vector<size_t> bucket_of_;             // parameter -> its bucket
  std::vector<unsigned> hooks_;               // parameter -> its hook
  std::vector<bool> ready_;                   // parameter -> accumulated in the running backward
  std::vector<size_t> pending_;               // bucket -> parameters not ready yet
  std::vector<std::shared_ptr<Work>> works_;  // bucket -> its collective in this pass
  bool pass_open_ = false;                    // a synchronized backward started and its finish() has not run
  std::weak_ptr<void> pass_alive_;            // expires with the queued finish(), run or dropped with a failed pass
  size_t launched_ = 0;                       // buckets started in this pass; they start in index order
};

}  // namespace strata::distributed
