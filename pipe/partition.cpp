#include "strata/pipe/partition.h"

#include <algorithm>
#include <climits>
#include <tuple>

// GCC 12 with sanitizers warns about std::function internals of <regex> (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#else
#include <regex>
#endif

#include "strata/tensor/error.h"

namespace strata::pipe {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/// Checks that parts runs ascending from 0 to num_items.
void check_boundaries(const std::vector<int>& parts, int num_items, const std::string& where) {
  STRATA_CHECK(!parts.empty(), where, ": expected at least one boundary, got none");
  STRATA_CHECK(parts.front() == 0, where, ": the first boundary must be 0, got ", parts.front());
  for (size_t s = 1; s < parts.size(); ++s)
    STRATA_CHECK(parts[s] >= parts[s - 1], where, ": boundaries must be ascending, got ", parts[s], " after ",
                 parts[s - 1], " (boundary ", s, ")");
  STRATA_CHECK(parts.back() == num_items, where, ": the last boundary must be the number of layers ", num_items,
               ", got ", parts.back());
}

/// Every stage holds at least one layer.
void check_fill(int num_items, int num_parts, const std::string& where) {
  STRATA_CHECK(num_parts >= 1, where, ": expected at least 1 stage, got ", num_parts);
  STRATA_CHECK(num_items >= num_parts, where, ": ", num_items, " layers cannot fill ", num_parts,
               " stages (each stage needs a layer)");
}

int layer_count(size_t n, const char* op) {
  STRATA_CHECK(n <= static_cast<size_t>(INT_MAX), op, ": ", n, " layers do not fit in an int");
  return static_cast<int>(n);
}

/// The last end j > i with prefix[j] - prefix[i] <= bound, for a bound no lighter than any weight. Parts are
/// usually short next to the whole list, so the search gallops from i before it bisects.
int part_end(const std::vector<int64_t>& prefix, int i, int64_t bound) {
  const int n = static_cast<int>(prefix.size()) - 1;
  auto fits = [&](int64_t p) { return p - prefix[i] <= bound; };
  int lo = i + 1;  // the part [i, lo) fits
  int64_t step = 1;
  while (step <= n - lo && fits(prefix[lo + step])) lo += static_cast<int>(step), step *= 2;
  const int hi = static_cast<int>(std::min<int64_t>(lo + step, n + 1));  // the first end known not to fit, or n + 1
  return static_cast<int>(std::partition_point(prefix.begin() + lo + 1, prefix.begin() + hi, fits) - prefix.begin()) -
         1;
}

/// The fewest contiguous parts with every part at most `bound` (greedy is optimal), counted up to cap + 1.
int count_parts(const std::vector<int64_t>& prefix, int64_t bound, int cap) {
  const int n = static_cast<int>(prefix.size()) - 1;
  int parts = 0;
  for (int i = 0; i < n && parts <= cap; ++parts) i = part_end(prefix, i, bound);
  return parts;
}

}  // namespace

std::vector<int> partition_uniform(int num_items, int num_parts) {
  STRATA_CHECK(num_items >= 0, "partition_uniform: the number of items must be non-negative, got ", num_items);
  STRATA_CHECK(num_parts >= 1 && num_parts < INT_MAX, "partition_uniform: expected 1 to ", INT_MAX - 1, " parts, got ",
               num_parts);
  std::vector<int> parts(num_parts + 1);
  // With fewer items than parts, chunk is 0 and residual num_items: part i < num_items gets one item.
  const int chunk = num_items / num_parts, residual = num_items - chunk * num_parts;
  for (int i = 0; i <= num_parts; ++i) parts[i] = i * chunk + std::min(i, residual);  // <= num_items: no overflow
  return parts;
}

// Note [exact balanced partition]: the smallest bottleneck B (heaviest part) lies in
// [max(w_max, ceil(total / p)), min(total, ceil(total / p) + w_max)]: with B = ceil(total / p) + w_max
// every greedy part but the last weighs more than total / p, so greedy needs at most p parts. Binary
// search finds the smallest integer B whose greedy part count (the fewest possible for that bound) is
// at most p; with n > p such a split can be refined to exactly p non-empty parts without raising B.
// Then the boundaries are picked stage by stage. g[i] (min_parts) is the fewest parts covering layers [i, n) with
// parts <= B (g[n] = 0; two pointers, since greedy is optimal and its reach only grows with i). For stage
// k starting at layer i with r = p - k stages left, an end j is valid when the part [i, j) is non-empty
// and weighs <= B, n - j >= r - 1 (the later stages stay non-empty) and g[j] <= r - 1 (they can hold the
// rest). g falls as j grows and the part's weight rises, so the valid ends form one range, never empty:
// the greedy end or n - r + 1, whichever is smaller, is valid. Among them we take the end whose part
// weight is closest to the remaining weight / r, then whose part size is closest to (n - i) / r, then the
// smaller j. Part weights grow with j, so the closest weights are the plateau just below that share and
// the plateau just above it; within a plateau the size rule is met at the clamped floor or ceiling of
// i + (n - i) / r. Each stage thus costs a few binary searches and the whole split O(n + p log n) after
// O(log w_max) counting passes of O(p log n) each.
std::vector<int> partition_balanced(const std::vector<int64_t>& weights, int num_parts) {
  STRATA_CHECK(num_parts >= 1, "partition_balanced: expected at least 1 part, got ", num_parts);
  const int n = layer_count(weights.size(), "partition_balanced");
  std::vector<int64_t> prefix(n + 1, 0);
  int64_t max_weight = 0;
  for (int i = 0; i < n; ++i) {
    STRATA_CHECK(weights[i] >= 0, "partition_balanced: weight ", weights[i], " of layer ", i, " is negative");
    STRATA_CHECK(weights[i] <= INT64_MAX - prefix[i], "partition_balanced: the weights sum to more than int64 holds");
    prefix[i + 1] = prefix[i] + weights[i];
    max_weight = std::max(max_weight, weights[i]);
  }
  if (n <= num_parts) return partition_uniform(n, num_parts);  // one layer per stage is optimal

  const int64_t total = prefix[n], share = ceil_div(total, num_parts);
  int64_t lo = std::max(max_weight, share), hi = max_weight > total - share ? total : share + max_weight;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (count_parts(prefix, mid, num_parts) <= num_parts)
      hi = mid;
    else
      lo = mid + 1;
  }
  const int64_t bound = lo;

  std::vector<int> reach(n), min_parts(n + 1, 0);  // reach[i]: the greedy end of a part starting at i
  for (int i = n - 1, j = n; i >= 0; --i) {
    while (prefix[j] - prefix[i] > bound) --j;
    reach[i] = j;
    min_parts[i] = 1 + min_parts[j];
  }

  std::vector<int> parts(num_parts + 1, 0);
  parts[num_parts] = n;
  for (int k = 0, i = 0; k < num_parts - 1; ++k) {
    const int r = num_parts - k;
    const int last = std::min(reach[i], n - r + 1);
    // min_parts falls as j grows, so the ends with few enough parts left start at `first`.
    const int first = static_cast<int>(std::partition_point(min_parts.begin() + i + 1, min_parts.begin() + last + 1,
                                                            [&](int g) { return g > r - 1; }) -
                                       min_parts.begin());
    STRATA_INTERNAL_ASSERT(first <= last);
    const int64_t remaining = total - prefix[i];
    const auto begin = prefix.begin() + first, end = prefix.begin() + last + 1;
    // The first end whose part weighs at least remaining / r, and the ends of the plateaus on either side.
    const int above =
        static_cast<int>(std::lower_bound(begin, end, prefix[i] + ceil_div(remaining, r)) - prefix.begin());
    auto key = [&](int j) {
      const __int128 weight_gap = static_cast<__int128>(prefix[j] - prefix[i]) * r - remaining;
      const int64_t size_gap = static_cast<int64_t>(j - i) * r - (n - i);
      return std::tuple(weight_gap < 0 ? -weight_gap : weight_gap, size_gap < 0 ? -size_gap : size_gap, j);
    };
    int best = -1;
    auto consider_plateau = [&](int j) {
      const int a = static_cast<int>(std::lower_bound(begin, end, prefix[j]) - prefix.begin());
      const int b = static_cast<int>(std::upper_bound(begin, end, prefix[j]) - prefix.begin()) - 1;
      const int ideal = i + (n - i) / r;
      for (int c : {a, b, ideal, ideal + 1})
        if (best < 0 || key(std::clamp(c, a, b)) < key(best)) best = std::clamp(c, a, b);
    };
    if (above <= last) consider_plateau(above);
    if (above > first) consider_plateau(above - 1);
    i = best;
    parts[k + 1] = i;
  }
  return parts;
}

std::vector<int64_t> part_weights(const std::vector<int64_t>& weights, const std::vector<int>& parts) {
  check_boundaries(parts, layer_count(weights.size(), "part_weights"), "part_weights");
  std::vector<int64_t> sums(parts.size() - 1, 0);
  for (size_t s = 0; s + 1 < parts.size(); ++s)
    for (int i = parts[s]; i < parts[s + 1]; ++i) sums[s] += weights[i];
  return sums;
}

void check_partition(const std::vector<int>& parts, int num_items, int num_parts, const std::string& where) {
  check_fill(num_items, num_parts, where);
  STRATA_CHECK(parts.size() == static_cast<size_t>(num_parts) + 1, where, ": expected ", num_parts + 1,
               " boundaries for ", num_parts, " stages, got ", parts.size());
  check_boundaries(parts, num_items, where);
  for (int s = 0; s < num_parts; ++s)
    STRATA_CHECK(parts[s + 1] > parts[s], where, ": stage ", s, " is empty (boundaries ", parts[s], " and ",
                 parts[s + 1], ")");
}

std::vector<int64_t> method_weights(const std::string& method, const std::vector<int64_t>& parameter_counts,
                                    const std::vector<std::string>& type_names) {
  const size_t n = parameter_counts.size();
  STRATA_CHECK(type_names.empty() || type_names.size() == n, "method_weights: ", type_names.size(), " type names for ",
               n, " layers");
  if (method == "uniform") return std::vector<int64_t>(n, 1);
  if (method == "parameters") {
    for (size_t i = 0; i < n; ++i)
      STRATA_CHECK(parameter_counts[i] >= 0, "method_weights: parameter count ", parameter_counts[i], " of layer ", i,
                   " is negative");
    return parameter_counts;
  }
  const std::string prefix = "type:";
  STRATA_CHECK(method.starts_with(prefix), "method_weights: unknown partition method '", method,
               "'; expected uniform, parameters or type:REGEX");
  const std::string pattern = method.substr(prefix.size());
  STRATA_CHECK(!pattern.empty(), "method_weights: '", method, "' needs a regex after 'type:'");
  STRATA_CHECK(n == 0 || !type_names.empty(), "method_weights: '", method, "' needs the type name of each layer");
  std::regex regex;
  try {
    regex = std::regex(pattern, std::regex::ECMAScript | std::regex::icase);
  } catch (const std::regex_error& e) {
    STRATA_CHECK(false, "method_weights: bad regex '", pattern, "' in '", method, "': ", e.what());
  }
  std::vector<int64_t> weights(n);
  for (size_t i = 0; i < n; ++i) weights[i] = std::regex_search(type_names[i], regex) ? 1 : 0;
  return weights;
}

std::vector<int> partition_by_method(const std::string& method, const std::vector<int64_t>& parameter_counts,
                                     const std::vector<std::string>& type_names, int num_parts) {
  const std::vector<int64_t> weights = method_weights(method, parameter_counts, type_names);
  const int n = layer_count(weights.size(), "partition_by_method");
  check_fill(n, num_parts, "partition_by_method");
  if (method == "uniform") return partition_uniform(n, num_parts);
  return partition_balanced(weights, num_parts);
}

}  // namespace strata::pipe
