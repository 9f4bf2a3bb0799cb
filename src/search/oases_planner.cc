#include "loom/search/oases_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include <fmt/format.h>

namespace loom::search {
namespace {

Expected<void> check_shape(const OasesRequest& r) {
  const std::size_t layers = r.node.size(), degrees = r.degrees.size();
  if (layers == 0 || degrees == 0)
    return fail(fmt::format("oases planner: {} layers and {} degrees; it needs at least one of each", layers, degrees));
  if (r.bytes.size() != layers || r.reshard.size() + 1 != layers)
    return fail(fmt::format("oases planner: {} layers of node costs, {} of bytes and {} boundaries (want {}, {})",
                            layers, r.bytes.size(), r.reshard.size(), layers, layers - 1));
  const auto finite = [](double x) { return std::isfinite(x); };
  for (std::size_t i = 0; i < layers; ++i) {
    if (r.node[i].size() != degrees || r.bytes[i].size() != degrees || !std::ranges::all_of(r.node[i], finite))
      return fail(fmt::format("oases planner: layer {} has {} node costs and {} byte counts for {} degrees, or a "
                              "non-finite cost",
                              i, r.node[i].size(), r.bytes[i].size(), degrees));
    if (i + 1 == layers) continue;
    if (r.reshard[i].size() != degrees)
      return fail(fmt::format("oases planner: boundary {} has {} rows for {} degrees", i, r.reshard[i].size(), degrees));
    for (const std::vector<double>& row : r.reshard[i])
      if (row.size() != degrees || !std::ranges::all_of(row, finite))
        return fail(fmt::format("oases planner: boundary {} has a row of {} costs for {} degrees, or a non-finite cost",
                                i, row.size(), degrees));
  }
  if (!std::isfinite(r.base)) return fail("oases planner: the base cost is not finite");
  return {};
}

// One prefix of the chain ending at some degree: its totals and where it came from.
struct Point {
  std::int64_t bytes = 0;
  double seconds = 0;
  int parent_degree = -1;  // the previous layer's degree index
  int parent = -1;         // index into that degree's front
};

}  // namespace

Expected<OasesChoice> evaluate_oases(const OasesRequest& r, std::span<const int> choice) {
  LOOM_RETURN_IF_ERROR(check_shape(r));
  if (choice.size() != r.node.size())
    return fail(fmt::format("oases planner: a choice of {} layers for a chain of {}", choice.size(), r.node.size()));
  OasesChoice out{.choice = {choice.begin(), choice.end()}, .seconds = r.base, .bytes = r.base_bytes};
  for (std::size_t i = 0; i < choice.size(); ++i) {
    const int d = choice[i];
    if (d < 0 || static_cast<std::size_t>(d) >= r.degrees.size())
      return fail(fmt::format("oases planner: layer {} chooses degree index {} of {}", i, d, r.degrees.size()));
    const auto du = static_cast<std::size_t>(d);
    out.seconds += r.node[i][du];
    out.bytes += r.bytes[i][du];
    if (i > 0) out.seconds += r.reshard[i - 1][static_cast<std::size_t>(choice[i - 1])][du];
  }
  return out;
}

Expected<OasesChoice> solve_oases(const OasesRequest& r) {
  LOOM_RETURN_IF_ERROR(check_shape(r));
  const std::size_t layers = r.node.size(), degrees = r.degrees.size();
  // The least bytes layers i.. can still add: a prefix above limit - that can never fit.
  std::vector<std::int64_t> least_rest(layers + 1, 0);
  for (std::size_t i = layers; i-- > 0;)
    least_rest[i] = least_rest[i + 1] + std::ranges::min(r.bytes[i]);
  if (r.base_bytes + least_rest[0] > r.memory_limit)
    return fail(fmt::format("oases planner: no choice of degrees fits in {} bytes per device; the least memory any "
                            "needs is {} bytes",
                            r.memory_limit, r.base_bytes + least_rest[0]),
                "use more GPUs per tp group, recomputation, or a smaller batch");
  // fronts[i][d]: the Pareto front of prefixes through layer i at degree d, bytes ascending, seconds
  // strictly descending.
  std::vector<std::vector<std::vector<Point>>> fronts(layers, std::vector<std::vector<Point>>(degrees));
  OasesChoice out;
  for (std::size_t i = 0; i < layers; ++i) {
    const std::int64_t budget = r.memory_limit - r.base_bytes - least_rest[i + 1];
    for (std::size_t d = 0; d < degrees; ++d) {
      std::vector<Point> candidates;
      if (i == 0) {
        candidates.push_back({r.bytes[0][d], r.base + r.node[0][d]});
      } else {
        for (std::size_t p = 0; p < degrees; ++p) {
          const auto& previous = fronts[i - 1][p];
          for (std::size_t k = 0; k < previous.size(); ++k)
            candidates.push_back({previous[k].bytes + r.bytes[i][d],
                                  previous[k].seconds + r.reshard[i - 1][p][d] + r.node[i][d], static_cast<int>(p),
                                  static_cast<int>(k)});
        }
      }
      std::ranges::stable_sort(candidates, {}, [](const Point& x) { return std::tuple(x.bytes, x.seconds); });
      std::vector<Point>& front = fronts[i][d];
      for (const Point& c : candidates)
        if (c.bytes <= budget && (front.empty() || c.seconds < front.back().seconds)) front.push_back(c);
      out.states += static_cast<std::int64_t>(front.size());
    }
  }
  int best_degree = -1, best = -1;
  for (std::size_t d = 0; d < degrees; ++d)
    for (std::size_t k = 0; k < fronts[layers - 1][d].size(); ++k) {
      const Point& c = fronts[layers - 1][d][k];
      if (best_degree >= 0) {
        const Point& b = fronts[layers - 1][static_cast<std::size_t>(best_degree)][static_cast<std::size_t>(best)];
        if (std::tuple(c.seconds, c.bytes) >= std::tuple(b.seconds, b.bytes)) continue;
      }
      best_degree = static_cast<int>(d);
      best = static_cast<int>(k);
    }
  // A feasible prefix always extends (least_rest), so the last layer's fronts are not all empty.
  out.choice.assign(layers, 0);
  for (std::size_t i = layers; i-- > 0;) {
    const Point& p = fronts[i][static_cast<std::size_t>(best_degree)][static_cast<std::size_t>(best)];
    if (i + 1 == layers) {
      out.seconds = p.seconds;
      out.bytes = p.bytes + r.base_bytes;
    }
    out.choice[i] = best_degree;
    best_degree = p.parent_degree;
    best = p.parent;
  }
  return out;
}

}  // namespace loom::search
