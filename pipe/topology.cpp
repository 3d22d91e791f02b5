#include "strata/pipe/topology.h"

#include <algorithm>
#include <climits>
#include <set>

#include "strata/distributed/collectives.h"
#include "strata/tensor/error.h"

namespace strata::pipe {

namespace dist = strata::distributed;

// ---- ProcessTopology ----

ProcessTopology::ProcessTopology(std::vector<std::string> axes, std::vector<int> dims)
    : axes_(std::move(axes)), dims_(std::move(dims)) {
  STRATA_CHECK(!axes_.empty(), "ProcessTopology: expected at least one axis");
  STRATA_CHECK(axes_.size() == dims_.size(), "ProcessTopology: ", axes_.size(), " axes but ", dims_.size(), " dims");
  std::set<std::string> seen;
  int64_t size = 1;
  for (size_t a = 0; a < axes_.size(); ++a) {
    STRATA_CHECK(seen.insert(axes_[a]).second, "ProcessTopology: axis '", axes_[a], "' appears twice");
    STRATA_CHECK(dims_[a] >= 1, "ProcessTopology: axis '", axes_[a], "' has dim ", dims_[a], "; dims must be positive");
    size *= dims_[a];
    STRATA_CHECK(size <= INT_MAX, "ProcessTopology: the number of ranks does not fit in an int");
  }
}

int ProcessTopology::axis_index(const std::string& axis, const char* op) const {
  auto it = std::find(axes_.begin(), axes_.end(), axis);
  if (it == axes_.end()) {
    std::string names;
    for (const auto& a : axes_) names += (names.empty() ? "" : ", ") + a;
    STRATA_CHECK(false, op, ": unknown axis '", axis, "'; the axes are ", names);
  }
  return static_cast<int>(it - axes_.begin());
}

int ProcessTopology::get_rank(const ProcessCoord& coord) const {
  for (const auto& [axis, idx] : coord) axis_index(axis, "ProcessTopology::get_rank");
  int rank = 0;
  for (size_t a = 0; a < axes_.size(); ++a) {
    auto it = coord.find(axes_[a]);
    STRATA_CHECK(it != coord.end(), "ProcessTopology::get_rank: the coordinate has no index for axis '", axes_[a], "'");
    STRATA_CHECK(it->second >= 0 && it->second < dims_[a], "ProcessTopology::get_rank: index ", it->second,
                 " is out of range for axis '", axes_[a], "' of dim ", dims_[a]);
    rank = rank * dims_[a] + it->second;
  }
  return rank;
}

ProcessCoord ProcessTopology::get_coord(int rank) const {
  STRATA_CHECK(rank >= 0 && rank < world_size(), "ProcessTopology::get_coord: rank ", rank,
               " is out of range for a topology of ", world_size(), " ranks");
  ProcessCoord coord;
  for (size_t a = axes_.size(); a-- > 0;) {
    coord[axes_[a]] = rank % dims_[a];
    rank /= dims_[a];
  }
  return coord;
}

int ProcessTopology::get_dim(const std::string& axis) const {
  return dims_[axis_index(axis, "ProcessTopology::get_dim")];
}

std::vector<int> ProcessTopology::get_axis_list(const std::string& axis, int idx) const {
  const int a = axis_index(axis, "ProcessTopology::get_axis_list");
  STRATA_CHECK(idx >= 0 && idx < dims_[a], "ProcessTopology::get_axis_list: index ", idx, " is out of range for axis '",
               axis, "' of dim ", dims_[a]);
  return filter_match({{axis, idx}});
}

std::vector<int> ProcessTopology::filter_match(const ProcessCoord& partial) const {
  for (const auto& [axis, idx] : partial) {
    const int a = axis_index(axis, "ProcessTopology::filter_match");
    STRATA_CHECK(idx >= 0 && idx < dims_[a], "ProcessTopology::filter_match: index ", idx,
                 " is out of range for axis '", axis, "' of dim ", dims_[a]);
  }
  std::vector<int> ranks;
  for (int r = 0; r < world_size(); ++r) {
    const ProcessCoord coord = get_coord(r);
    if (std::all_of(partial.begin(), partial.end(), [&](const auto& kv) { return coord.at(kv.first) == kv.second; }))
      ranks.push_back(r);
  }
  return ranks;
}

std::vector<std::vector<int>> ProcessTopology::get_axis_comm_lists(const std::string& axis) const {
  const int a = axis_index(axis, "ProcessTopology::get_axis_comm_lists");
  // Row-major: moving one step along axis `a` adds the product of the dims after it. Every rank with
  // index 0 along `a`, in ascending order, starts one list; ascending rank order is the row-major order
  // of the other coordinates.
  int stride = 1;
  for (size_t b = a + 1; b < dims_.size(); ++b) stride *= dims_[b];
  std::vector<std::vector<int>> lists;
  for (int r = 0; r < world_size(); ++r) {
    if ((r / stride) % dims_[a] != 0) continue;
    std::vector<int> list(dims_[a]);
    for (int i = 0; i < dims_[a]; ++i) list[i] = r + i * stride;
    lists.push_back(std::move(list));
  }
  return lists;
}

int ProcessTopology::world_size() const {
  int size = 1;
  for (int d : dims_) size *= d;
  return size;
}

std::ostream& operator<<(std::ostream& os, const ProcessTopology& topo) {
  for (int r = 0; r < topo.world_size(); ++r) {
    const ProcessCoord coord = topo.get_coord(r);
    os << "rank " << r << ":";
    for (const auto& axis : topo.get_axis_names()) os << " " << axis << "=" << coord.at(axis);
    os << "\n";
  }
  return os;
}

PipeDataParallelTopology::PipeDataParallelTopology(int num_pp, int num_dp)
    : ProcessTopology({"pipe", "data"}, {num_pp, num_dp}) {}

PipeModelDataParallelTopology::PipeModelDataParallelTopology(int num_pp, int num_mp, int num_dp)
    : ProcessTopology({"pipe", "data", "model"}, {num_pp, num_dp, num_mp}) {}

// ---- PipelineParallelGrid ----

namespace {

void check_initialized(const char* op) {
  STRATA_CHECK(dist::is_initialized(), op, ": distributed::init() has not been called; call it on every rank first");
}

PipeDataParallelTopology stages_topology(int num_stages) {
  check_initialized("PipelineParallelGrid");
  STRATA_CHECK(num_stages >= 1, "PipelineParallelGrid: expected at least 1 stage, got ", num_stages);
  const int world = dist::get_world_size();
  STRATA_CHECK(world % num_stages == 0, "PipelineParallelGrid: world size ", world, " is not divisible by ", num_stages,
               " stages");
  return PipeDataParallelTopology(num_stages, world / num_stages);
}

bool has_axis(const ProcessTopology& topo, const std::string& axis) {
  const auto& names = topo.get_axis_names();
  return std::find(names.begin(), names.end(), axis) != names.end();
}

// Makes a group for every list (a collective over WORLD, the same lists in the same order on every
// rank) and returns the one this rank belongs to.
dist::Group make_groups(const std::vector<std::vector<int>>& lists) {
  dist::Group mine;
  for (const auto& list : lists) {
    dist::Group group = dist::new_group(list);
    if (group->is_member()) mine = group;
  }
  STRATA_INTERNAL_ASSERT(mine);
  return mine;
}

}  // namespace

PipelineParallelGrid::PipelineParallelGrid(const ProcessTopology& topology) : topology_(topology) {
  check_initialized("PipelineParallelGrid");
  const int world = dist::get_world_size();
  STRATA_CHECK(world == topology_.world_size(), "PipelineParallelGrid: the topology has ", topology_.world_size(),
               " ranks but the world size is ", world);
  for (const char* axis : {"pipe", "data"})
    STRATA_CHECK(has_axis(topology_, axis), "PipelineParallelGrid: the topology has no '", axis, "' axis");
  rank_ = dist::get_rank();
  const ProcessCoord me = topology_.get_coord(rank_);
  stage_id_ = me.at("pipe");
  data_parallel_id_ = me.at("data");
  num_stages_ = topology_.get_dim("pipe");
  num_dp_ = topology_.get_dim("data");
  const bool has_model = has_axis(topology_, "model");
  num_mp_ = has_model ? topology_.get_dim("model") : 1;

  pp_group_ = make_groups(topology_.get_axis_comm_lists("pipe"));
  dp_group_ = make_groups(topology_.get_axis_comm_lists("data"));
  if (has_model) {
    mp_group_ = make_groups(topology_.get_axis_comm_lists("model"));
  } else {
    // As DeepSpeed: one single-rank group per rank, each made by every rank (new_group is collective).
    std::vector<std::vector<int>> singles;
    for (int r = 0; r < world; ++r) singles.push_back({r});
    mp_group_ = make_groups(singles);
  }
}

PipelineParallelGrid::PipelineParallelGrid(int num_stages) : PipelineParallelGrid(stages_topology(num_stages)) {}

int PipelineParallelGrid::stage_to_global(int stage) const {
  STRATA_CHECK(stage >= 0 && stage < num_stages_, "PipelineParallelGrid::stage_to_global: stage ", stage,
               " is out of range for ", num_stages_, " stages");
  return pp_group_->ranks()[stage];  // the pipe group lists this replica's ranks in stage order
}

int PipelineParallelGrid::prev_stage_rank() const { return is_first_stage() ? -1 : stage_to_global(stage_id_ - 1); }

int PipelineParallelGrid::next_stage_rank() const { return is_last_stage() ? -1 : stage_to_global(stage_id_ + 1); }

}  // namespace strata::pipe
