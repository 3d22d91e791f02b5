#include "strata/pipe/p2p.h"

#include <algorithm>
#include <cstdlib>
#include <exception>

#include "strata/tensor/error.h"

namespace strata::pipe {

namespace dist = strata::distributed;

P2P::P2P(const PipelineParallelGrid& grid, dist::Group group) : grid_(grid), group_(std::move(group)) {
  const dist::Group& world = dist::get_world_group();
  STRATA_CHECK(!group_ || group_->ranks() == world->ranks(), "P2P: the transfers' group ", group_->describe(),
               " must hold every rank of WORLD in WORLD's order");
}

int P2P::peer_rank(const char* op, int peer_stage) const {
  const int stage = grid_.get_stage_id(), stages = grid_.get_pipe_parallel_world_size();
  STRATA_CHECK(peer_stage >= 0 && peer_stage < stages, op, ": stage ", peer_stage, " is out of range for ", stages,
               " stages");
  STRATA_CHECK(peer_stage != stage, op, ": stage ", stage, " cannot talk to itself");
  const bool adjacent = std::abs(peer_stage - stage) == 1;
  const bool first_and_last = std::min(stage, peer_stage) == 0 && std::max(stage, peer_stage) == stages - 1;
  STRATA_CHECK(adjacent || first_and_last, op, ": stage ", stage,
               " may only talk to adjacent stages or between the first and the last stage, not to stage ", peer_stage,
               " (", stages, " stages)");
  return grid_.stage_to_global(peer_stage);
}

void P2P::send(const Tensor& tensor, int dest_stage, bool async_op) {
  if (async_op)
    pending_.push_back(isend(tensor, dest_stage));
  else
    dist::send(tensor, peer_rank("P2P::send", dest_stage), group_);
}

void P2P::recv(const Tensor& tensor, int src_stage, bool async_op) {
  if (async_op)
    pending_.push_back(irecv(tensor, src_stage));
  else
    dist::recv(tensor, peer_rank("P2P::recv", src_stage), group_);
}

std::shared_ptr<dist::Work> P2P::isend(const Tensor& tensor, int dest_stage, int tag) {
  return dist::isend(tensor, peer_rank("P2P::send", dest_stage), group_, tag);
}

std::shared_ptr<dist::Work> P2P::irecv(const Tensor& tensor, int src_stage, int tag) {
  return dist::irecv(tensor, peer_rank("P2P::recv", src_stage), group_, tag);
}

bool P2P::receives_post_ahead(Device device) const {
  const dist::Group& group = group_ ? group_ : dist::get_world_group();
  return group->backend(device, "P2P").receives_post_ahead();
}

void P2P::wait() { wait_all(pending_); }

void P2P::wait_all(std::vector<std::shared_ptr<dist::Work>>& works) {
  // Every op is waited for even when one fails, so no request is left posted; the first error is rethrown.
  std::exception_ptr first_error;
  for (const auto& work : works) {
    try {
      work->wait();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  works.clear();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace strata::pipe
