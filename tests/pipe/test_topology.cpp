// ProcessTopology without processes: row-major ranks, coordinates, axis lists and communication lists
// against DeepSpeed's layouts, the printed form, and the errors for bad axes and indices.

#include <sstream>

#include "strata/pipe/topology.h"
#include "../helpers.h"

namespace strata::pipe {
namespace {

using Lists = std::vector<std::vector<int>>;

TEST(PipeTopology, RowMajorLastAxisFastest) {
  PipeDataParallelTopology topo(2, 2);
  EXPECT_EQ(topo.get_axis_names(), (std::vector<std::string>{"pipe", "data"}));
  EXPECT_EQ(topo.world_size(), 4);
  EXPECT_EQ(topo.get_rank({{"pipe", 0}, {"data", 0}}), 0);
  EXPECT_EQ(topo.get_rank({{"pipe", 0}, {"data", 1}}), 1);
  EXPECT_EQ(topo.get_rank({{"pipe", 1}, {"data", 0}}), 2);
  EXPECT_EQ(topo.get_rank({{"pipe", 1}, {"data", 1}}), 3);
  EXPECT_EQ(topo.get_coord(2), (ProcessCoord{{"pipe", 1}, {"data", 0}}));
}

TEST(PipeTopology, CoordAndRankRoundTrip) {
  ProcessTopology topo({"a", "b", "c"}, {2, 3, 4});
  EXPECT_EQ(topo.world_size(), 24);
  EXPECT_EQ(topo.get_dim("b"), 3);
  for (int r = 0; r < topo.world_size(); ++r) EXPECT_EQ(topo.get_rank(topo.get_coord(r)), r);
  EXPECT_EQ(topo.get_coord(23), (ProcessCoord{{"a", 1}, {"b", 2}, {"c", 3}}));
  EXPECT_EQ(topo.get_rank({{"a", 1}, {"b", 0}, {"c", 2}}), 14);  // 1 * 12 + 0 * 4 + 2
}

TEST(PipeTopology, AxisCommListsAsDeepSpeed) {
  PipeDataParallelTopology topo(2, 2);
  EXPECT_EQ(topo.get_axis_comm_lists("data"), (Lists{{0, 1}, {2, 3}}));
  EXPECT_EQ(topo.get_axis_comm_lists("pipe"), (Lists{{0, 2}, {1, 3}}));

  PipeDataParallelTopology wide(4, 2);
  EXPECT_EQ(wide.get_axis_comm_lists("pipe"), (Lists{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(wide.get_axis_comm_lists("data"), (Lists{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));

  ProcessTopology single({"pipe", "data"}, {3, 1});
  EXPECT_EQ(single.get_axis_comm_lists("data"), (Lists{{0}, {1}, {2}}));
  EXPECT_EQ(single.get_axis_comm_lists("pipe"), (Lists{{0, 1, 2}}));
}

TEST(PipeTopology, ModelDataParallelDimsOrder) {
  // Constructor (pp, mp, dp), axes (pipe, data, model), dims (pp, dp, mp).
  PipeModelDataParallelTopology topo(/*num_pp=*/2, /*num_mp=*/3, /*num_dp=*/2);
  EXPECT_EQ(topo.get_axis_names(), (std::vector<std::string>{"pipe", "data", "model"}));
  EXPECT_EQ(topo.get_dim("pipe"), 2);
  EXPECT_EQ(topo.get_dim("data"), 2);
  EXPECT_EQ(topo.get_dim("model"), 3);
  EXPECT_EQ(topo.get_axis_comm_lists("model"), (Lists{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10, 11}}));
  EXPECT_EQ(topo.get_axis_comm_lists("data"), (Lists{{0, 3}, {1, 4}, {2, 5}, {6, 9}, {7, 10}, {8, 11}}));
  EXPECT_EQ(topo.get_axis_comm_lists("pipe"), (Lists{{0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}, {5, 11}}));
}

TEST(PipeTopology, CommListsPartitionTheRanks) {
  ProcessTopology topo({"x", "y", "z"}, {3, 2, 4});
  for (const auto& axis : topo.get_axis_names()) {
    std::vector<int> seen(topo.world_size(), 0);
    for (const auto& list : topo.get_axis_comm_lists(axis)) {
      ASSERT_EQ(static_cast<int>(list.size()), topo.get_dim(axis));
      const ProcessCoord first = topo.get_coord(list[0]);
      for (int i = 0; i < static_cast<int>(list.size()); ++i) {
        ProcessCoord c = topo.get_coord(list[i]);
        EXPECT_EQ(c.at(axis), i) << axis;
        c[axis] = first.at(axis);
        EXPECT_EQ(c, first) << axis;  // only `axis` differs
        ++seen[list[i]];
      }
    }
    EXPECT_EQ(seen, std::vector<int>(topo.world_size(), 1)) << axis;
  }
}

TEST(PipeTopology, AxisListAndFilterMatch) {
  PipeModelDataParallelTopology topo(2, 2, 2);  // axes (pipe, data, model), all of dim 2
  EXPECT_EQ(topo.get_axis_list("pipe", 1), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(topo.get_axis_list("data", 0), (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(topo.get_axis_list("model", 1), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(topo.filter_match({{"pipe", 0}, {"model", 1}}), (std::vector<int>{1, 3}));
  EXPECT_EQ(topo.filter_match({{"pipe", 1}, {"data", 1}, {"model", 0}}), (std::vector<int>{6}));
  EXPECT_EQ(topo.filter_match({}), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(PipeTopology, PrintsOneLinePerRank) {
  std::ostringstream os;
  os << PipeDataParallelTopology(2, 2);
  EXPECT_EQ(os.str(),
            "rank 0: pipe=0 data=0\n"
            "rank 1: pipe=0 data=1\n"
            "rank 2: pipe=1 data=0\n"
            "rank 3: pipe=1 data=1\n");
  std::ostringstream three;
  three << PipeModelDataParallelTopology(1, 2, 1);
  EXPECT_EQ(three.str(), "rank 0: pipe=0 data=0 model=0\nrank 1: pipe=0 data=0 model=1\n");
}

TEST(PipeTopology, Errors) {
  EXPECT_THROW_MSG(ProcessTopology({"a", "b"}, {2}), "ProcessTopology: 2 axes but 1 dims");
  EXPECT_THROW_MSG(ProcessTopology({}, {}), "ProcessTopology: expected at least one axis");
  EXPECT_THROW_MSG(ProcessTopology({"a", "a"}, {1, 2}), "ProcessTopology: axis 'a' appears twice");
  EXPECT_THROW_MSG(PipeDataParallelTopology(2, 0), "ProcessTopology: axis 'data' has dim 0; dims must be positive");

  PipeDataParallelTopology topo(2, 3);
  EXPECT_THROW_MSG(topo.get_rank({{"pipe", 1}}),
                   "ProcessTopology::get_rank: the coordinate has no index for axis 'data'");
  EXPECT_THROW_MSG(topo.get_rank({{"pipe", 1}, {"data", 0}, {"model", 0}}),
                   "ProcessTopology::get_rank: unknown axis 'model'; the axes are pipe, data");
  EXPECT_THROW_MSG(topo.get_rank({{"pipe", 2}, {"data", 0}}),
                   "ProcessTopology::get_rank: index 2 is out of range for axis 'pipe' of dim 2");
  EXPECT_THROW_MSG(topo.get_rank({{"pipe", 0}, {"data", -1}}),
                   "ProcessTopology::get_rank: index -1 is out of range for axis 'data' of dim 3");
  EXPECT_THROW_MSG(topo.get_coord(6), "ProcessTopology::get_coord: rank 6 is out of range for a topology of 6 ranks");
  EXPECT_THROW_MSG(topo.get_coord(-1), "ProcessTopology::get_coord: rank -1 is out of range");
  EXPECT_THROW_MSG(topo.get_dim("model"), "ProcessTopology::get_dim: unknown axis 'model'");
  EXPECT_THROW_MSG(topo.get_axis_list("data", 3),
                   "ProcessTopology::get_axis_list: index 3 is out of range for axis 'data' of dim 3");
  EXPECT_THROW_MSG(topo.get_axis_list("tensor", 0), "ProcessTopology::get_axis_list: unknown axis 'tensor'");
  EXPECT_THROW_MSG(topo.filter_match({{"tensor", 0}}), "ProcessTopology::filter_match: unknown axis 'tensor'");
  EXPECT_THROW_MSG(topo.filter_match({{"pipe", 5}}),
                   "ProcessTopology::filter_match: index 5 is out of range for axis 'pipe' of dim 2");
  EXPECT_THROW_MSG(topo.get_axis_comm_lists("model"), "ProcessTopology::get_axis_comm_lists: unknown axis 'model'");
}

}  // namespace
}  // namespace strata::pipe
