#pragma once
// Process topologies (DeepSpeed's ProcessTopology) and the pipeline grid built on one.
//
//   pipe::PipeDataParallelTopology topo(/*num_pp=*/2, /*num_dp=*/2);  // axes (pipe, data)
//   topo.get_rank({{"pipe", 1}, {"data", 0}});                       // 2: the last axis varies fastest
//   topo.get_axis_comm_lists("data");                                // {{0, 1}, {2, 3}}
//   std::cout << topo;                                               // "rank 0: pipe=0 data=0" ...
//
//   namespace dist = strata::distributed;
//   pipe::PipelineParallelGrid grid(topo);  // under mpirun -np 4, on every rank: makes the groups
//   Tensor t = ones({4});
//   grid.get_stage_id(); grid.next_stage_rank(); dist::all_reduce(t, dist::ReduceOp::AVG, grid.get_data_parallel_group());
//
// A topology is plain data (tested without processes); the grid adds the process groups.

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "strata/distributed/process_group.h"

namespace strata::pipe {

/// Axis name to index along that axis, e.g. {{"pipe", 1}, {"data", 0}}.
using ProcessCoord = std::map<std::string, int>;

/// Ranks laid out on a grid of named axes, row-major: the last axis varies fastest.
class ProcessTopology {
 public:
  /// A grid with one dimension per axis; names must be distinct and dims positive.
  ProcessTopology(std::vector<std::string> axes, std::vector<int> dims);

  /// The rank at `coord`; every axis must be given, each index within its dim.
  int get_rank(const ProcessCoord& coord) const;
  /// The coordinate of `rank`, one entry per axis.
  ProcessCoord get_coord(int rank) const;
  /// The size of `axis`.
  int get_dim(const std::string& axis) const;
  /// The axis names, in layout order.
  const std::vector<std::string>& get_axis_names() const { return axes_; }
  /// Every rank whose index along `axis` is idx, ascending.
  std::vector<int> get_axis_list(const std::string& axis, int idx) const;
  /// Every rank that matches all given axes (any subset of them), ascending.
  std::vector<int> filter_match(const ProcessCoord& partial) const;
  /// The groups of ranks that differ only along `axis`, each ordered by that axis; e.g. the data-parallel groups.
  std::vector<std::vector<int>> get_axis_comm_lists(const std::string& axis) const;
  /// The number of ranks (the product of the dims).
  int world_size() const;

 private:
  int axis_index(const std::string& axis, const char* op) const;
  std::vector<std::string> axes_;
  std::vector<int> dims_;
};

/// One line per rank: "rank 2: pipe=1 data=0".
std::ostream& operator<<(std::ostream& os, const ProcessTopology& topo);

/// Axes (pipe, data): data-parallel peers are neighbours in rank order.
class PipeDataParallelTopology : public ProcessTopology {
 public:
  PipeDataParallelTopology(int num_pp, int num_dp);  ///< num_pp stages, num_dp data-parallel replicas
};

/// Axes (pipe, data, model), for tensor-model parallelism inside each stage.
class PipeModelDataParallelTopology : public ProcessTopology {
 public:
  PipeModelDataParallelTopology(int num_pp, int num_mp, int num_dp);  ///< stages, model-parallel ranks, replicas
};

/// This rank's place in a pipe/data(/model) topology, with its process groups (DeepSpeed's PipelineParallelGrid).
/// Every rank of WORLD constructs it with the same topology; groups are made in the same order on every rank.
class PipelineParallelGrid {
 public:
  /// A grid over WORLD; the topology's world size must equal WORLD's, and it must have "pipe" and "data" axes.
  explicit PipelineParallelGrid(const ProcessTopology& topology);
  /// A PipeDataParallelTopology of num_stages x (world size / num_stages); throws when that does not divide.
  explicit PipelineParallelGrid(int num_stages);

  const ProcessTopology& topology() const { return topology_; }     ///< the layout
  int get_global_rank() const { return rank_; }                     ///< this rank in WORLD
  int get_stage_id() const { return stage_id_; }                    ///< this rank's pipeline stage
  int get_data_parallel_id() const { return data_parallel_id_; }    ///< this rank's replica index
  int get_pipe_parallel_world_size() const { return num_stages_; }  ///< number of stages
  int get_data_parallel_world_size() const { return num_dp_; }      ///< number of replicas
  /// Model-parallel ranks per stage (1 without that axis)
  int get_model_parallel_world_size() const { return num_mp_; }
  bool is_first_stage() const { return stage_id_ == 0; }               ///< stage 0
  bool is_last_stage() const { return stage_id_ == num_stages_ - 1; }  ///< the last stage
  /// The ranks of this rank's replica across stages (same data and model index), ordered by stage.
  const distributed::Group& get_pipe_parallel_group() const { return pp_group_; }
  /// The ranks of this stage across replicas (same stage and model index), ordered by data index.
  const distributed::Group& get_data_parallel_group() const { return dp_group_; }
  /// The ranks of this stage and replica across the model axis (only this rank without that axis).
  const distributed::Group& get_model_parallel_group() const { return mp_group_; }
  /// The global rank of `stage` with this rank's other coordinates.
  int stage_to_global(int stage) const;
  int prev_stage_rank() const;  ///< the global rank of the previous stage, -1 on the first stage
  int next_stage_rank() const;  ///< the global rank of the next stage, -1 on the last stage

 private:
  ProcessTopology topology_;
  int rank_ = 0, stage_id_ = 0, data_parallel_id_ = 0, num_stages_ = 1, num_dp_ = 1, num_mp_ = 1;
  distributed::Group pp_group_, dp_group_, mp_group_;
};

}  // namespace strata::pipe
