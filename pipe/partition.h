#pragma once
// Splitting a list of layers into contiguous stages; pure functions over plain numbers.
//
//   pipe::partition_uniform(10, 4);                          // {0, 3, 6, 8, 10}
//   pipe::partition_balanced({5, 1, 1, 1, 4, 4}, 3);         // {0, 2, 5, 6}: stages weigh 6, 6, 4; no split does better than 6
//   auto w = pipe::method_weights("type:Linear", {0, 200960, 0, 2570}, {"flatten", "Linear", "ReLU", "Linear"});
//   // {0, 1, 0, 1}: 1 per Linear layer, 0 otherwise
//
// Boundaries are S + 1 ascending layer indices: stage s runs layers [parts[s], parts[s + 1]).

#include <cstdint>
#include <string>
#include <vector>

namespace strata::pipe {

/// num_parts near-equal parts of num_items, the larger ones first (DeepSpeed's partition_uniform).
/// With fewer items than parts, the trailing parts are empty.
std::vector<int> partition_uniform(int num_items, int num_parts);

/// The split of non-negative weights into num_parts contiguous parts whose heaviest part is as light as
/// possible (exact, not a heuristic). Among the optimal splits it takes, stage by stage, the part closest to
/// an even share of what is left, so the result is deterministic. No part is empty when there are at least
/// as many weights as parts.
std::vector<int> partition_balanced(const std::vector<int64_t>& weights, int num_parts);

/// The total weight of each part.
std::vector<int64_t> part_weights(const std::vector<int64_t>& weights, const std::vector<int>& parts);

/// Throws unless `parts` has num_parts + 1 ascending entries from 0 to num_items with no empty part (so
/// num_items >= num_parts, PipelineModule's rule); `where` starts the message.
void check_partition(const std::vector<int>& parts, int num_items, int num_parts, const std::string& where);

/// The per-layer weights a partition method balances: "uniform" gives 1 per layer, "parameters" the
/// parameter counts, "type:REGEX" 1 for layers whose type name matches REGEX (std::regex_search, case-insensitive).
std::vector<int64_t> method_weights(const std::string& method, const std::vector<int64_t>& parameter_counts,
                                    const std::vector<std::string>& type_names);

/// Boundaries for a method: partition_uniform for "uniform", else partition_balanced of method_weights.
/// Throws for fewer layers than parts: every stage needs one (PipelineModule's rule).
std::vector<int> partition_by_method(const std::string& method, const std::vector<int64_t>& parameter_counts,
                                     const std::vector<std::string>& type_names, int num_parts);

}  // namespace strata::pipe
