// The comm logger: totals per op and group, the bus factors, the printed table, logging off, and
// concurrent logging.

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <strata/distributed/collectives.h>
#include <strata/distributed/comm_logger.h>
#include <strata/distributed/detail/runtime.h>
#include <strata/strata.h>

namespace strata::distributed {
namespace {

// Every test starts with empty totals and leaves logging as it found it.
class CommLogger : public ::testing::Test {
 protected:
  void SetUp() override {
    was_on_ = comm_logging();
    reset_comm_summary();
  }
  void TearDown() override {
    set_comm_logging(was_on_);
    reset_comm_summary();
  }

 private:
  bool was_on_ = false;
};

// The totals of `op` on `group`, or null.
const CommStats* find(const std::vector<CommStats>& stats, const std::string& op, const std::string& group) {
  for (const CommStats& s : stats)
    if (s.op == op && s.group == group) return &s;
  return nullptr;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST_F(CommLogger, CountsCallsAndBytesPerOp) {
  set_comm_logging(true);
  EXPECT_TRUE(comm_logging());
  const int n = get_world_size();
  Tensor t = ones({4}, kFloat32);
  all_reduce(t);
  all_reduce(t);
  all_reduce(t, ReduceOp::SUM, {}, /*async_op=*/true)->wait();
  Tensor gathered = empty({4 * n}, kFloat32);
  all_gather_into_tensor(gathered, t);
  Tensor longs = zeros({3}, kLong);
  broadcast(longs, 0);

  const std::vector<CommStats> stats = comm_summary();
  const std::string world = get_world_group()->describe();
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].op, "all_gather_into_tensor");  // sorted by op
  EXPECT_EQ(stats[1].op, "all_reduce");
  EXPECT_EQ(stats[2].op, "broadcast");
  for (const CommStats& s : stats) {
    EXPECT_EQ(s.group, world);
    EXPECT_EQ(s.group_size, n);
    EXPECT_GT(s.total_s, 0) << s.op;
  }
  EXPECT_EQ(stats[0].calls, 1);
  EXPECT_EQ(stats[0].bytes, 16 * n);  // the output, the larger side
  EXPECT_EQ(stats[1].calls, 3);       // the async call counts once its wait() returns
  EXPECT_EQ(stats[1].bytes, 3 * 16);
  EXPECT_EQ(stats[2].calls, 1);
  EXPECT_EQ(stats[2].bytes, 24);
}

TEST_F(CommLogger, KeepsGroupsApart) {
  std::vector<int> reversed;
  for (int r = get_world_size() - 1; r >= 0; --r) reversed.push_back(r);
  Group group = new_group(reversed);
  set_comm_logging(true);
  Tensor t = ones({2}, kFloat32);
  all_reduce(t);
  all_reduce(t, ReduceOp::MAX, group);
  all_reduce(t, ReduceOp::MAX, group);

  const std::vector<CommStats> stats = comm_summary();
  const CommStats* on_world = find(stats, "all_reduce", get_world_group()->describe());
  const CommStats* on_group = find(stats, "all_reduce", group->describe());
  ASSERT_NE(on_world, nullptr);
  ASSERT_NE(on_group, nullptr);
  EXPECT_NE(group->describe(), get_world_group()->describe());
  EXPECT_EQ(on_world->calls, 1);
  EXPECT_EQ(on_group->calls, 2);
  EXPECT_EQ(on_group->bytes, 16);
  EXPECT_EQ(on_group->group_size, get_world_size());
}

TEST_F(CommLogger, RecordsNothingWhileOff) {
  set_comm_logging(false);
  EXPECT_FALSE(comm_logging());
  Tensor t = ones({4}, kFloat32);
  all_reduce(t);
  broadcast(t, 0);
  barrier();
  EXPECT_TRUE(comm_summary().empty());
  std::ostringstream os;
  print_comm_summary(os);
  EXPECT_NE(os.str().find("nothing logged (logging is off"), std::string::npos) << os.str();
}

TEST_F(CommLogger, ResetForgetsTheTotals) {
  set_comm_logging(true);
  Tensor t = ones({4}, kFloat32);
  all_reduce(t);
  EXPECT_EQ(comm_summary().size(), 1u);
  reset_comm_summary();
  EXPECT_TRUE(comm_summary().empty());
}

// Bus bandwidth as nccl-tests defines it: 2(n-1)/n for all_reduce, (n-1)/n for the ops where each
// rank sends or receives all but its own slice, 1 for the rest.
TEST(CommStats, BandwidthAndBusFactors) {
  auto stats = [](const std::string& op, int n) {
    CommStats s;
    s.op = op;
    s.group = "WORLD";
    s.group_size = n;
    s.calls = 4;
    s.bytes = 8000;
    s.total_s = 2;
    return s;
  };
  EXPECT_DOUBLE_EQ(stats("broadcast", 4).mean_s(), 0.5);
  EXPECT_DOUBLE_EQ(stats("broadcast", 4).algbw(), 4000);
  EXPECT_DOUBLE_EQ(stats("all_reduce", 4).busbw(), 6000);
  EXPECT_DOUBLE_EQ(stats("all_reduce", 2).busbw(), 4000);
  EXPECT_DOUBLE_EQ(stats("all_reduce", 1).busbw(), 0);
  EXPECT_DOUBLE_EQ(stats("all_reduce_coalesced", 4).busbw(), 6000);
  for (const char* op : {"all_gather", "all_gather_into_tensor", "all_gather_coalesced", "reduce_scatter",
                         "reduce_scatter_tensor", "all_to_all", "all_to_all_single"})
    EXPECT_DOUBLE_EQ(stats(op, 4).busbw(), 3000) << op;
  for (const char* op : {"broadcast", "reduce", "gather", "scatter", "send", "recv", "barrier"})
    EXPECT_DOUBLE_EQ(stats(op, 4).busbw(), 4000) << op;

  const CommStats none;
  EXPECT_EQ(none.mean_s(), 0);
  EXPECT_EQ(none.algbw(), 0);
  EXPECT_EQ(none.busbw(), 0);
}

TEST_F(CommLogger, PrintsAnAlignedTable) {
  set_comm_logging(true);
  Tensor t = zeros({256}, kFloat32);  // 1 KiB a call
  all_reduce(t);
  all_reduce(t);
  Tensor longs = zeros({3}, kLong);
  broadcast(longs, 0);
  std::ostringstream os;
  print_comm_summary(os);

  const std::vector<std::string> lines = lines_of(os.str());
  ASSERT_EQ(lines.size(), 5u) << os.str();  // title, header, rule, two rows
  EXPECT_NE(lines[0].find("comm summary (rank " + std::to_string(get_rank())), std::string::npos) << lines[0];
  for (const char* column : {"op", "group", "calls", "bytes", "total ms", "mean us", "algbw GB/s", "busbw GB/s"})
    EXPECT_NE(lines[1].find(column), std::string::npos) << column;
  EXPECT_EQ(lines[2], std::string(lines[1].size(), '-'));
  EXPECT_EQ(lines[3].rfind("all_reduce ", 0), 0u) << lines[3];
  EXPECT_NE(lines[3].find(" WORLD "), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find(" 2  2.00 KiB "), std::string::npos) << lines[3];
  EXPECT_EQ(lines[4].rfind("broadcast ", 0), 0u) << lines[4];
  EXPECT_NE(lines[4].find(" 1 "), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find(" 24 B "), std::string::npos) << lines[4];
  // Numbers are right-aligned, so every row ends where the header does.
  EXPECT_EQ(lines[3].size(), lines[1].size());
  EXPECT_EQ(lines[4].size(), lines[1].size());
}

TEST_F(CommLogger, CountsOpsFromManyThreads) {
  constexpr int kThreads = 4, kOpsPerThread = 1000;
  detail::OpRecord record;
  record.op = "all_reduce";
  record.group = get_world_group().get();
  record.bytes = 8;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < kOpsPerThread; ++k) detail::log_op(record, 1e-6);
    });
  for (std::thread& thread : threads) thread.join();

  const std::vector<CommStats> stats = comm_summary();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].calls, kThreads * kOpsPerThread);
  EXPECT_EQ(stats[0].bytes, 8 * kThreads * kOpsPerThread);
  EXPECT_NEAR(stats[0].total_s, kThreads * kOpsPerThread * 1e-6, 1e-9);
}

// Logging starts as STRATA_COMM_LOG says (ctest runs this once with STRATA_COMM_LOG=1); the tests
// above restore whatever they change.
TEST(CommLoggerEnvironment, StartsAsTheEnvironmentSays) {
  const char* value = std::getenv("STRATA_COMM_LOG");
  EXPECT_EQ(comm_logging(), value != nullptr && std::string(value) == "1");
}

}  // namespace
}  // namespace strata::distributed
