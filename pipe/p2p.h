#pragma once
// Stage-to-stage point-to-point transfers through a pipeline grid (DeepSpeed's pipe p2p layer).
//
//   pipe::PipelineParallelGrid grid(pipe::PipeDataParallelTopology(2, 2));
//   pipe::P2P p2p(grid);
//   Tensor activation = empty({32, 256}), grad = empty({32, 256});
//   if (grid.is_first_stage()) p2p.send(activation, /*dest_stage=*/1);
//   else p2p.recv(activation, /*src_stage=*/0);              // the same shape and dtype as sent
//   p2p.send(grad, 0, /*async_op=*/true); p2p.wait();          // async ops finish in wait()
//
// Stages are pipeline stage ids; the peer is the rank of that stage with this rank's data (and model) index.
// Only adjacent stages, or the first and the last stage, may talk; anything else is an error naming both.

#include <memory>
#include <vector>

#include "strata/distributed/collectives.h"
#include "strata/pipe/topology.h"

namespace strata::pipe {

/// Sends and receives between this rank's stage and another stage of its pipeline.
class P2P {
 public:
  /// Transfers within `grid`, which must outlive this object, through `group` (WORLD when unset): a group of every
  /// rank of WORLD, in WORLD's order, with a communicator of its own (PipelineEngineOptions::p2p_group).
  explicit P2P(const PipelineParallelGrid& grid, distributed::Group group = {});
  explicit P2P(PipelineParallelGrid&&, distributed::Group = {}) = delete;  ///< a temporary grid would dangle

  /// Sends `tensor` to dest_stage; with async_op it returns at once and wait() finishes it.
  void send(const Tensor& tensor, int dest_stage, bool async_op = false);
  /// Receives into `tensor` from src_stage; with async_op it returns at once and wait() finishes it.
  void recv(const Tensor& tensor, int src_stage, bool async_op = false);
  /// Posts a send of `tensor` to dest_stage and returns its Work, which keeps `tensor` until it finishes.
  std::shared_ptr<distributed::Work> isend(const Tensor& tensor, int dest_stage, int tag = 0);
  /// Posts a receive into `tensor` from src_stage and returns its Work.
  std::shared_ptr<distributed::Work> irecv(const Tensor& tensor, int src_stage, int tag = 0);
  /// Whether receives of tensors on `device` may be posted long before their messages (Backend::receives_post_ahead).
  bool receives_post_ahead(Device device) const;
  /// Finishes every outstanding async send and receive, in the order they were posted.
  void wait();
  /// Waits for every one of `works`, in order, even after one fails, clears them, then rethrows the first error.
  static void wait_all(std::vector<std::shared_ptr<distributed::Work>>& works);
  /// Number of async ops not yet finished by wait().
  size_t num_pending() const { return pending_.size(); }

 private:
  /// The global rank of `peer_stage`, after checking that this stage may talk to it.
  int peer_rank(const char* op, int peer_stage) const;
  const PipelineParallelGrid& grid_;
  distributed::Group group_;
  std::vector<std::shared_ptr<distributed::Work>> pending_;
};

}  // namespace strata::pipe
