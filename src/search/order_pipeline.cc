// Pipeline schedules as order requests (order_pipeline.h).
#include "loom/search/order_pipeline.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/plan/schedule_3f1b.h"

namespace loom::search {
namespace {

std::size_t us(int i) { return static_cast<std::size_t>(i); }

// The least of 1, 10, 100, 1000 ticks per unit that makes every cost whole; else 1000 (rounded).
int ticks_per_unit(const std::vector<double>& costs) {
  for (int scale : {1, 10, 100, 1000}) {
    bool whole = true;
    for (double c : costs) whole = whole && std::abs(c * scale - std::round(c * scale)) <= 1e-9 * std::max(1.0, c * scale);
    if (whole) return scale;
  }
  return 1000;
}

}  // namespace

Expected<PipelineRequest> pipeline_request(const PipelineOrderShape& shape) {
  const int S = shape.devices, P = shape.passes, m = shape.micro_batches;
  if (S < 1 || P < 1 || m < 1)
    return fail(fmt::format("pipeline order: {} devices, {} passes and {} micro-batches", S, P, m),
                "each must be at least 1");
  const plan::BlockCosts& c = shape.costs;
  const std::vector<double> costs = shape.split_backward ? std::vector{c.forward, c.backward, c.weight}
                                                         : std::vector{c.forward, c.backward + c.weight};
  for (double cost : costs)
    if (!std::isfinite(cost) || cost <= 0)
      return fail(fmt::format("pipeline order: the block costs F {}, B {}, W {} are not all above 0", c.forward,
                              c.backward, c.weight),
                  "give every block a positive, finite cost");
  if (!shape.memory_caps.empty() && shape.memory_caps.size() != us(S))
    return fail(fmt::format("pipeline order: {} memory caps for {} devices", shape.memory_caps.size(), S),
                "give one cap per device, or none for 1F1B's S - d");

  PipelineRequest out;
  out.ticks_per_unit = ticks_per_unit(costs);
  const auto ticks = [&](double cost) { return static_cast<std::int64_t>(std::llround(cost * out.ticks_per_unit)); };
  OrderRequest& r = out.request;
  r.devices = S;
  r.budget = shape.budget;
  r.greedy_upper_bound = shape.greedy_upper_bound;
  const int stages = P * S, last = (P - 1) * S;
  // Indices: forwards [stage * m + k]; then per last-pass stage its backwards, then (split) its weights.
  const auto f = [&](int v, int k) { return v * m + k; };
  const auto b = [&](int d, int k) { return stages * m + d * m + k; };
  const auto w = [&](int d, int k) { return stages * m + S * m + d * m + k; };
  for (int v = 0; v < stages; ++v)
    for (int k = 0; k < m; ++k) {
      r.blocks.push_back({fmt::format("F{} s{}", k, v), v % S, ticks(c.forward), 0, -1});
      out.blocks.push_back({v, k, plan::BlockPart::forward});
    }
  for (int d = 0; d < S; ++d)
    for (int k = 0; k < m; ++k) {
      r.blocks.push_back({fmt::format("B{} s{}", k, last + d), d, ticks(shape.split_backward ? c.backward : c.backward + c.weight), 0, -1});
      out.blocks.push_back({last + d, k, plan::BlockPart::backward});
    }
  if (shape.split_backward)
    for (int d = 0; d < S; ++d)
      for (int k = 0; k < m; ++k) {
        r.blocks.push_back({fmt::format("W{} s{}", k, last + d), d, ticks(c.weight), 0, -1});
        out.blocks.push_back({last + d, k, plan::BlockPart::weight});
      }
  for (int d = 0; d < S; ++d)
    for (int k = 0; k < m; ++k) {
      OrderBlock& held = r.blocks[us(f(last + d, k))];
      held.holds = 1;
      held.released_by = shape.split_backward ? w(d, k) : b(d, k);
    }
  for (int v = 0; v < stages; ++v)
    for (int k = 0; k < m; ++k) {
      if (v > 0) r.dependencies.push_back({f(v - 1, k), f(v, k)});
      if (k > 0) r.constraints.push_back({f(v, k - 1), f(v, k), "micro-batch order"});
    }
  for (int d = 0; d < S; ++d)
    for (int k = 0; k < m; ++k) {
      r.dependencies.push_back({f(last + d, k), b(d, k)});
      if (d + 1 < S) r.dependencies.push_back({b(d + 1, k), b(d, k)});
      if (k > 0) r.constraints.push_back({b(d, k - 1), b(d, k), "micro-batch order"});
      if (shape.split_backward) {
        r.dependencies.push_back({b(d, k), w(d, k)});
        if (k > 0) r.constraints.push_back({w(d, k - 1), w(d, k), "micro-batch order"});
      }
    }
  if (shape.table7)
    for (int d = 0; d < S; ++d) {
      for (int p = 0; p + 1 < P; ++p)
        for (int j = std::max(P - 1, 1); j < m; ++j)
          r.constraints.push_back({f(p * S + d, j), f((p + 1) * S + d, j - 1), "Table 7 (1)/(2)"});
      const int ofst = S - 1 - d;
      for (int j = ofst + 1; j < m; ++j) r.constraints.push_back({f(last + d, j), b(d, j - ofst), "Table 7 (3)"});
    }
  if (P >= 2 && shape.recycles_ahead >= 0)
    for (int d = 0; d < S; ++d)
      for (int j = S - d + shape.recycles_ahead; j < m; ++j)
        r.constraints.push_back({b(d, j - (S - d + shape.recycles_ahead)), f(d, j), "in flight"});
  r.memory_caps = shape.memory_caps;
  if (r.memory_caps.empty())
    for (int d = 0; d < S; ++d) r.memory_caps.push_back(S - d);
  return out;
}

Expected<std::vector<std::vector<int>>> pipeline_order(const PipelineRequest& pipeline,
                                                       const std::vector<std::vector<plan::Block>>& devices) {
  std::vector<std::vector<int>> order(devices.size());
  for (std::size_t d = 0; d < devices.size(); ++d)
    for (const plan::Block& block : devices[d]) {
      const auto it = std::ranges::find(pipeline.blocks, block);
      if (it == pipeline.blocks.end())
        return fail(fmt::format("pipeline order: device {} runs {} of stage {}, which the request does not have", d,
                                plan::to_string(block), block.stage));
      order[d].push_back(static_cast<int>(it - pipeline.blocks.begin()));
    }
  return order;
}

Expected<PipelineOrder> search_pipeline_order(const PipelineOrderShape& shape) {
  LOOM_ASSIGN_OR_RETURN(PipelineRequest pipeline, pipeline_request(shape));
  if (shape.table7 && shape.passes >= 2 && shape.pilot_upper_bound) {
    LOOM_ASSIGN_OR_RETURN(const plan::ThreeFOneBSearch pilot,
                          plan::search_three_f_one_b(shape.devices, shape.passes, shape.micro_batches, shape.costs));
    LOOM_ASSIGN_OR_RETURN(auto order, pipeline_order(pipeline, pilot.devices));
    LOOM_ASSIGN_OR_RETURN(const OrderEvaluation kept, evaluate_order(pipeline.request, order));
    if (kept.violations.empty()) pipeline.request.initial_order = std::move(order);
  }
  PipelineOrder out;
  LOOM_ASSIGN_OR_RETURN(out.solution, solve_order(pipeline.request));
  out.ticks_per_unit = pipeline.ticks_per_unit;
  out.devices.resize(us(shape.devices));
  for (int d = 0; d < shape.devices; ++d)
    for (int block : out.solution.order[us(d)]) out.devices[us(d)].push_back(pipeline.blocks[us(block)]);
  if (shape.table7 && shape.passes >= 2)
    if (const auto broken = plan::three_f_one_b_violations(out.devices, shape.passes, shape.micro_batches);
        !broken.empty())
      return fail(fmt::format("pipeline order: the 3F1B template breaks {}", join(broken, "; ")),
                  "report this: the order request and three_f_one_b_violations disagree");
  LOOM_ASSIGN_OR_RETURN(out.evaluation,
                        with_context(plan::evaluate_schedule(out.devices, shape.devices * shape.passes,
                                                             shape.micro_batches, shape.costs),
                                     "pipeline order"));
  return out;
}

}  // namespace loom::search
