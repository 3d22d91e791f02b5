// The flight recorder: what dump_flight_recorder writes (calls in order, their state, group, call number,
// dtype, shape, root or peer, tag and label), how the ring keeps only the newest calls, and the labels the
// pipeline engine gives its instructions. The failure dumps and strata-flight's analysis are exercised by
// the fault tests (tests/distributed/fault.cmake).

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>
#include <strata/distributed/flight_recorder.h>
#include <strata/strata.h>

#include "pipe_training.h"

namespace strata {
namespace {

namespace dist = distributed;
namespace pipe_training = testing::pipe_training;
using Json = nlohmann::json;

Json dump(const std::string& reason) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("strata_flight_" + std::to_string(::getpid()) + ".json")).string();
  dist::dump_flight_recorder(path, reason);
  Json j = Json::parse(std::ifstream(path));
  std::filesystem::remove(path);
  return j;
}

TEST(FlightRecorder, DumpHoldsTheCallsInOrderWithTheirLabels) {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  Tensor t = full({2, 3}, 1.0, kFloat);
  {
    dist::FlightContext outer("outer");
    dist::all_reduce(t, dist::ReduceOp::MAX);
    {
      dist::FlightContext inner("inner \"quoted\"");
      dist::broadcast(t, world - 1);
    }
    if (world > 1) {
      if (rank == 0) dist::send(t, 1, {}, 7);
      if (rank == 1) dist::recv(t, 0, {}, 7);
    }
  }
  const uint64_t seq = dist::get_world_group()->sequence_number();
  const Json j = dump("asked by the test");
  EXPECT_EQ(j.at("format"), "strata-flight-1");
  EXPECT_EQ(j.at("rank"), rank);
  EXPECT_EQ(j.at("world_size"), world);
  EXPECT_EQ(j.at("reason"), "asked by the test");
  EXPECT_EQ(j.at("size"), 1024);
  const Json& calls = j.at("calls");
  ASSERT_GE(calls.size(), 2u);
  const bool p2p = world > 1 && rank < 2;
  const Json& reduce = calls[calls.size() - (p2p ? 3 : 2)];
  const Json& bcast = calls[calls.size() - (p2p ? 2 : 1)];
  EXPECT_EQ(reduce.at("op"), "all_reduce");
  EXPECT_EQ(reduce.at("seq"), seq - 1);
  EXPECT_EQ(reduce.at("dtype"), "Float");
  EXPECT_EQ(reduce.at("shape"), Json({2, 3}));
  EXPECT_EQ(reduce.at("reduce_op"), "MAX");
  EXPECT_EQ(reduce.at("state"), "completed");
  EXPECT_EQ(reduce.at("label"), "outer");
  EXPECT_LE(reduce.at("start_ns").get<int64_t>(), reduce.at("end_ns").get<int64_t>());
  EXPECT_EQ(bcast.at("op"), "broadcast");
  EXPECT_EQ(bcast.at("seq"), seq);
  EXPECT_EQ(bcast.at("root"), world - 1);  // a global rank
  EXPECT_EQ(bcast.at("label"), "inner \"quoted\"");
  EXPECT_TRUE(bcast.at("reduce_op").is_null());
  if (p2p) {
    const Json& last = calls.back();
    EXPECT_EQ(last.at("op"), rank == 0 ? "send" : "recv");
    EXPECT_EQ(last.at("peer"), 1 - rank);
    EXPECT_EQ(last.at("tag"), 7);
    EXPECT_EQ(last.at("seq"), 0);  // point to point: no call number on the group
    EXPECT_EQ(last.at("label"), "outer");
  }
  bool world_named = false;
  for (const Json& g : j.at("groups")) world_named |= g.at("id") == 0 && g.at("name") == "WORLD";
  EXPECT_TRUE(world_named);
  for (size_t i = 1; i < calls.size(); ++i)
    EXPECT_EQ(calls[i].at("id").get<uint64_t>(), calls[i - 1].at("id").get<uint64_t>() + 1);
}

// The record does not depend on the consistency checks: with them OFF a call still has its shape.
TEST(FlightRecorder, RecordsShapesWithTheChecksOff) {
  const dist::DebugLevel level = dist::get_debug_level();
  dist::set_debug_level(dist::DebugLevel::OFF);
  Tensor t = zeros({3, 1});
  dist::all_reduce(t);
  dist::set_debug_level(level);
  EXPECT_EQ(dump("off").at("calls").back().at("shape"), Json({3, 1}));
}

TEST(FlightRecorder, TheRingKeepsTheNewestCalls) {
  for (int i = 0; i < 1100; ++i) dist::barrier();
  const Json j = dump("ring");
  const Json& calls = j.at("calls");
  ASSERT_EQ(calls.size(), 1024u);
  EXPECT_EQ(calls.back().at("seq"), dist::get_world_group()->sequence_number());
  EXPECT_EQ(calls.front().at("seq").get<uint64_t>(), dist::get_world_group()->sequence_number() - 1023);
}

TEST(FlightRecorder, PipelineInstructionsLabelTheirCommunication) {
  if (dist::get_world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  pipe::PipelineParallelGrid grid(2);
  auto model =
      std::make_shared<pipe::PipelineModule>(pipe_training::mlp_layers(), grid, pipe_training::module_options());
  model->to(kDouble);
  auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
  pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = pipe_training::kMicroBatches});
  auto [x, y] = pipe_training::whole_batch(0, grid.get_data_parallel_world_size(), kDouble);
  engine.train_batch(pipe_training::micro_batches(x, y, grid.get_data_parallel_id()));
  const Json j = dump("pipeline");
  const std::string stage = "stage " + std::to_string(grid.get_stage_id()) + ", step ";
  bool labelled_send = false;
  for (const Json& call : j.at("calls")) {
    const std::string label = call.at("label");
    const std::string op = call.at("op");
    if ((op == "send" || op == "isend") && label.starts_with(stage) &&
        (label.find("SendActivation") != std::string::npos || label.find("SendGrad") != std::string::npos))
      labelled_send |= label.find(", micro-batch ") != std::string::npos;
  }
  EXPECT_TRUE(labelled_send);
}

}  // namespace
}  // namespace strata
