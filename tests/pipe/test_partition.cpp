// Partitioning without processes: DeepSpeed's uniform split, the exact balanced split against a brute
// force on many random cases (bottleneck and the documented choice among optimal splits), method weights,
// and the checks on boundaries.

#include <algorithm>
#include <chrono>
#include <climits>
#include <numeric>
#include <random>

#include "strata/pipe/partition.h"
#include "../helpers.h"

namespace strata::pipe {
namespace {

using Parts = std::vector<int>;
using Weights = std::vector<int64_t>;

int64_t heaviest(const Weights& w, const Parts& parts) {
  const Weights sums = part_weights(w, parts);
  return sums.empty() ? 0 : *std::max_element(sums.begin(), sums.end());
}

int64_t range_sum(const Weights& w, int i, int j) { return std::accumulate(w.begin() + i, w.begin() + j, int64_t{0}); }

// The lightest possible heaviest part over every split into p contiguous parts (non-empty when n >= p).
int64_t brute_bottleneck(const Weights& w, int p) {
  const int n = static_cast<int>(w.size());
  if (n <= p) return n == 0 ? 0 : *std::max_element(w.begin(), w.end());
  // best[k][j]: the lightest heaviest part splitting the first j layers into k non-empty parts.
  std::vector<std::vector<int64_t>> best(p + 1, std::vector<int64_t>(n + 1, INT64_MAX));
  best[0][0] = 0;
  for (int k = 1; k <= p; ++k)
    for (int j = k; j <= n; ++j)
      for (int i = k - 1; i < j; ++i)
        if (best[k - 1][i] != INT64_MAX)
          best[k][j] = std::min(best[k][j], std::max(best[k - 1][i], range_sum(w, i, j)));
  return best[p][n];
}

// The header's choice among the optimal splits, spelled out literally: at each stage, scan every end that
// keeps the split optimal and feasible and take the closest weight share, then size share, then smaller end.
Parts brute_choice(const Weights& w, int p) {
  const int n = static_cast<int>(w.size());
  if (n <= p) {  // one layer per stage, the trailing stages empty
    Parts parts(p + 1);
    for (int s = 0; s <= p; ++s) parts[s] = std::min(s, n);
    return parts;
  }
  const int64_t bound = brute_bottleneck(w, p);
  std::vector<int> fewest(n + 1, INT_MAX);  // the fewest parts <= bound covering [j, n)
  fewest[n] = 0;
  for (int j = n - 1; j >= 0; --j)
    for (int k = j + 1; k <= n && range_sum(w, j, k) <= bound; ++k)
      if (fewest[k] != INT_MAX) fewest[j] = std::min(fewest[j], 1 + fewest[k]);
  Parts parts = {0};
  for (int stage = 0, i = 0; stage < p - 1; ++stage) {
    const int r = p - stage;
    const double weight_share = static_cast<double>(range_sum(w, i, n)) / r,
                 size_share = static_cast<double>(n - i) / r;
    int chosen = -1;
    std::pair<double, double> chosen_key;
    for (int j = i + 1; j <= n; ++j) {
      if (range_sum(w, i, j) > bound || n - j < r - 1 || fewest[j] > r - 1) continue;
      const std::pair<double, double> key = {std::abs(range_sum(w, i, j) - weight_share),
                                             std::abs((j - i) - size_share)};
      if (chosen < 0 || key < chosen_key) chosen = j, chosen_key = key;
    }
    parts.push_back(i = chosen);
  }
  parts.push_back(n);
  return parts;
}

// Proof of optimality for large cases: greedy with a bound one lighter needs more than p parts.
int greedy_parts(const Weights& w, int64_t bound) {
  int parts = 0;
  int64_t sum = 0;
  for (int64_t x : w) {
    if (x > bound) return INT_MAX;
    if (parts == 0 || sum + x > bound) ++parts, sum = 0;
    sum += x;
  }
  return parts;
}

// ---- uniform ----

TEST(PipePartition, UniformAsDeepSpeed) {
  EXPECT_EQ(partition_uniform(10, 4), (Parts{0, 3, 6, 8, 10}));
  EXPECT_EQ(partition_uniform(8, 4), (Parts{0, 2, 4, 6, 8}));
  EXPECT_EQ(partition_uniform(7, 1), (Parts{0, 7}));
  EXPECT_EQ(partition_uniform(4, 4), (Parts{0, 1, 2, 3, 4}));
  EXPECT_EQ(partition_uniform(3, 5), (Parts{0, 1, 2, 3, 3, 3}));
  EXPECT_EQ(partition_uniform(0, 2), (Parts{0, 0, 0}));
  EXPECT_THROW_MSG(partition_uniform(-1, 2), "partition_uniform: the number of items must be non-negative, got -1");
  EXPECT_THROW_MSG(partition_uniform(3, 0), "partition_uniform: expected 1 to 2147483646 parts, got 0");
  // INT_MAX parts would need INT_MAX + 1 boundaries.
  EXPECT_THROW_MSG(partition_uniform(3, INT_MAX), "partition_uniform: expected 1 to 2147483646 parts, got 2147483647");
}

// ---- balanced ----

TEST(PipePartition, BalancedKnownCases) {
  EXPECT_EQ(partition_balanced({5, 1, 1, 1, 4, 4}, 3), (Parts{0, 2, 5, 6}));
  EXPECT_EQ(part_weights({5, 1, 1, 1, 4, 4}, {0, 2, 5, 6}), (Weights{6, 6, 4}));
  // All ones: stages of 2 or 3, the tie going to the smaller stage first.
  EXPECT_EQ(partition_balanced(Weights(10, 1), 4), (Parts{0, 2, 5, 7, 10}));
  EXPECT_EQ(partition_balanced({1, 1, 1, 100, 1, 1}, 2), (Parts{0, 3, 6}));  // 3 | 102 beats 103 | 2
  EXPECT_EQ(partition_balanced({1, 2, 3, 4}, 1), (Parts{0, 4}));
  EXPECT_EQ(partition_balanced({3, 7}, 4), (Parts{0, 1, 2, 2, 2}));  // fewer layers than stages: trailing stages empty
  EXPECT_EQ(partition_balanced({}, 3), (Parts{0, 0, 0, 0}));
}

TEST(PipePartition, BalancedZeroWeights) {
  EXPECT_EQ(partition_balanced(Weights(6, 0), 3), (Parts{0, 2, 4, 6}));
  // Only layers 1 and 4 weigh: each stage gets one of them, and the zero layers spread evenly.
  const Weights w = {0, 1, 0, 0, 1, 0};
  const Parts parts = partition_balanced(w, 2);
  EXPECT_EQ(parts, (Parts{0, 3, 6}));
  EXPECT_EQ(part_weights(w, parts), (Weights{1, 1}));
}

TEST(PipePartition, BalancedMatchesBruteForce) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = static_cast<int>(rng() % 13), p = 1 + static_cast<int>(rng() % 6);
    const int max_weight = trial % 3 == 0 ? 1 : 9;  // many zeros in every third case
    Weights w(n);
    for (auto& x : w) x = static_cast<int64_t>(rng() % (max_weight + 1));
    const Parts parts = partition_balanced(w, p);
    SCOPED_TRACE(::testing::PrintToString(w) + " into " + std::to_string(p));
    if (n >= p) {
      ASSERT_NO_THROW(check_partition(parts, n, p, "balanced"));  // fewer layers leave stages empty
    }
    EXPECT_EQ(heaviest(w, parts), brute_bottleneck(w, p));
    EXPECT_EQ(parts, brute_choice(w, p));
  }
}

TEST(PipePartition, BalancedLargeIsOptimalAndFast) {
  std::mt19937 rng(7);
  Weights w(10000);
  for (auto& x : w) x = 1000 + static_cast<int64_t>(rng() % 100000);
  w[1234] = 5'000'000;  // one heavy layer sets a wide search range
  for (int p : {2, 64, 512, 9999, 10000}) {
    const auto start = std::chrono::steady_clock::now();
    const Parts parts = partition_balanced(w, p);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    check_partition(parts, static_cast<int>(w.size()), p, "balanced");
    const int64_t bottleneck = heaviest(w, parts);
    EXPECT_LE(greedy_parts(w, bottleneck), p);
    EXPECT_GT(greedy_parts(w, bottleneck - 1), p) << p << " stages";
    EXPECT_LT(ms, 100.0) << p << " stages";  // about a millisecond in Release; loose for sanitizers
  }
}

TEST(PipePartition, BalancedErrors) {
  EXPECT_THROW_MSG(partition_balanced({1, -1}, 2), "partition_balanced: weight -1 of layer 1 is negative");
  EXPECT_THROW_MSG(partition_balanced({1}, 0), "partition_balanced: expected at least 1 part, got 0");
  EXPECT_THROW_MSG(partition_balanced({INT64_MAX, 1}, 2),
                   "partition_balanced: the weights sum to more than int64 holds");
}

// ---- boundaries ----

TEST(PipePartition, PartWeights) {
  EXPECT_EQ(part_weights({1, 2, 3, 4}, {0, 1, 1, 4}), (Weights{1, 0, 9}));
  EXPECT_EQ(part_weights({}, {0, 0}), (Weights{0}));
  EXPECT_THROW_MSG(part_weights({1, 2}, {0, 3}),
                   "part_weights: the last boundary must be the number of layers 2, got 3");
  EXPECT_THROW_MSG(part_weights({1, 2}, {}), "part_weights: expected at least one boundary, got none");
}

TEST(PipePartition, CheckPartition) {
  EXPECT_NO_THROW(check_partition({0, 2, 5, 6}, 6, 3, "partition"));
  EXPECT_THROW_MSG(check_partition({0, 1, 2, 2}, 2, 3, "partition"),
                   "partition: 2 layers cannot fill 3 stages (each stage needs a layer)");
  EXPECT_THROW_MSG(check_partition({0, 5, 10}, 10, 4, "partition"),
                   "partition: expected 5 boundaries for 4 stages, got 3");
  EXPECT_THROW_MSG(check_partition({0, 5, 3, 10}, 10, 3, "partition"),
                   "partition: boundaries must be ascending, got 3 after 5 (boundary 2)");
  EXPECT_THROW_MSG(check_partition({1, 5, 10}, 10, 2, "partition"), "partition: the first boundary must be 0, got 1");
  EXPECT_THROW_MSG(check_partition({0, 5, 9}, 10, 2, "partition"),
                   "partition: the last boundary must be the number of layers 10, got 9");
  EXPECT_THROW_MSG(check_partition({0, 5, 5, 10}, 10, 3, "PipelineModule"),
                   "PipelineModule: stage 1 is empty (boundaries 5 and 5)");
  EXPECT_THROW_MSG(check_partition({0}, 0, 0, "partition"), "partition: expected at least 1 stage, got 0");
}

// ---- methods ----

TEST(PipePartition, MethodWeights) {
  const Weights counts = {10, 0, 300, 40};
  const std::vector<std::string> names = {"Embedding", "ReLU", "Linear", "LayerNorm"};
  EXPECT_EQ(method_weights("uniform", counts, names), (Weights{1, 1, 1, 1}));
  EXPECT_EQ(method_weights("parameters", counts, names), counts);
  EXPECT_EQ(method_weights("parameters", counts, {}), counts);  // names are needed only by type:
  EXPECT_EQ(method_weights("type:Linear", counts, names), (Weights{0, 0, 1, 0}));
  EXPECT_EQ(method_weights("type:linear", counts, names), (Weights{0, 0, 1, 0}));  // case-insensitive, as DeepSpeed
  EXPECT_EQ(method_weights("type:^(embedding|layernorm)$", counts, names), (Weights{1, 0, 0, 1}));
  EXPECT_EQ(method_weights("type:norm", counts, names), (Weights{0, 0, 0, 1}));  // a search, not a full match
}

TEST(PipePartition, MethodWeightsErrors) {
  const Weights counts = {10, 20};
  const std::vector<std::string> names = {"Linear", "ReLU"};
  EXPECT_THROW_MSG(method_weights("type:Lin[", counts, names), "method_weights: bad regex 'Lin[' in 'type:Lin[':");
  EXPECT_THROW_MSG(method_weights("balanced", counts, names),
                   "method_weights: unknown partition method 'balanced'; expected uniform, parameters or type:REGEX");
  EXPECT_THROW_MSG(method_weights("uniform", counts, {"Linear"}), "method_weights: 1 type names for 2 layers");
  EXPECT_THROW_MSG(method_weights("parameters", {5, -3}, names),
                   "method_weights: parameter count -3 of layer 1 is negative");
  EXPECT_THROW_MSG(method_weights("type:Linear", counts, {}),
                   "method_weights: 'type:Linear' needs the type name of each layer");
  EXPECT_THROW_MSG(method_weights("type:", counts, names), "method_weights: 'type:' needs a regex after 'type:'");
}

TEST(PipePartition, PartitionByMethod) {
  const Weights counts = {100, 1, 1, 1, 100, 1, 1, 1};
  const std::vector<std::string> names = {"Linear", "ReLU", "Dropout", "ReLU", "Linear", "ReLU", "Dropout", "ReLU"};
  EXPECT_EQ(partition_by_method("uniform", counts, names, 3), (Parts{0, 3, 6, 8}));
  EXPECT_EQ(partition_by_method("parameters", counts, names, 2), (Parts{0, 4, 8}));
  EXPECT_EQ(partition_by_method("type:linear", counts, names, 2), (Parts{0, 4, 8}));
  EXPECT_EQ(partition_by_method("type:relu", counts, names, 4), (Parts{0, 2, 4, 6, 8}));
  EXPECT_THROW_MSG(partition_by_method("sizes", counts, names, 2), "method_weights: unknown partition method 'sizes'");
  // Every method refuses plans with empty stages, as PipelineModule does.
  for (const char* method : {"uniform", "parameters", "type:linear"})
    EXPECT_THROW_MSG(partition_by_method(method, counts, names, 9),
                     "partition_by_method: 8 layers cannot fill 9 stages (each stage needs a layer)");
}

}  // namespace
}  // namespace strata::pipe
