// compare_runs (plan_interpreter.h): per role, the worst tensor-wise error of a plan's run against the
// single-device run.
#include <cmath>

#include "loom/ir/graph.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::verify {
namespace {

void record(ErrorStat& stat, const std::string& name, double abs, double rel) {
  stat.max_abs = std::max(stat.max_abs, abs);
  if (stat.worst.empty() || rel > stat.max_rel) {
    stat.max_rel = rel;
    stat.worst = name;
  }
}

ErrorStat& stat_for(RunComparison& c, const ir::Graph& graph, const ir::FullTensor& t) {
  if (t.id == graph.loss) return c.loss;
  switch (t.role) {
    case ir::TensorRole::gradient: return c.gradient;
    case ir::TensorRole::parameter:
    case ir::TensorRole::optimizer_state: return c.updated;
    default: return c.activation;
  }
}

}  // namespace

Expected<RunComparison> compare_runs(const ir::Graph& graph, const std::vector<NdArray>& reference,
                                     const std::vector<NdArray>& candidate, double floor) {
  if (reference.size() < graph.tensors.size() || candidate.size() < graph.tensors.size())
    return failf("compare_runs: {} tensors, but the runs hold {} and {} values", graph.tensors.size(), reference.size(),
                 candidate.size());
  const std::vector<ir::OpId> producer = ir::producers(graph);
  RunComparison c;
  for (const ir::FullTensor& t : graph.tensors) {
    if (!producer[t.id.index()].valid()) continue;  // leaves feed both runs
    const NdArray &ref = reference[t.id.index()], &got = candidate[t.id.index()];
    if (ref.shape != got.shape || ref.data.size() != got.data.size())
      return failf("compare_runs: tensor '{}' has shape {} in the reference and {} in the plan", t.name,
                   ref.shape.to_string(), got.shape.to_string());
    double abs = 0, scale = 0;
    for (std::size_t i = 0; i < ref.data.size(); ++i) {
      const double diff = std::abs(ref.data[i] - got.data[i]);
      abs = std::isnan(diff) ? INFINITY : std::max(abs, diff);
      scale = std::max(scale, std::abs(ref.data[i]));
    }
    const double denominator = std::max(scale, floor);
    const double rel = abs == 0 ? 0.0 : (denominator == 0 ? INFINITY : abs / denominator);
    record(stat_for(c, graph, t), t.name, abs, rel);
    record(c.overall, t.name, abs, rel);
  }
  return c;
}

}  // namespace loom::verify
