#include "loom/verify/closed_step.h"

#include <cmath>
#include <map>

#include "loom/plan/residence.h"
#include "plan_assembly.h"

namespace loom::verify {

Expected<ClosedStep> check_closed_step(const exec::ExecPlan& exec, const ExecRun& run,
                                       const std::vector<NdArray>& reference, double floor) {
  const ir::Graph& graph = *exec.plan->graph;
  if (run.held.size() != exec.buffers.size() || reference.size() < graph.tensors.size())
    return failf("check_closed_step: a run of {} buffers and {} reference values for an ExecPlan of {} buffers and {} "
                 "tensors",
                 run.held.size(), reference.size(), exec.buffers.size(), graph.tensors.size());
  std::vector<ir::TensorId> updated(graph.tensors.size());  // by tensor: its updated version
  for (const ir::FullTensor& t : graph.tensors)
    if (t.updates.valid() && plan::persists(graph, t.updates)) updated[t.updates.index()] = t.id;
  std::map<std::pair<int, std::uint32_t>, std::vector<exec::BufferId>> held;  // (device, tensor) -> buffers at the end
  for (std::size_t b = 0; b < exec.buffers.size(); ++b)
    if (!run.held[b].data.empty())
      held[{exec.buffers[b].device, exec.buffers[b].piece.tensor.value}].emplace_back(static_cast<std::uint32_t>(b));

  ClosedStep closed;
  std::map<std::uint32_t, std::pair<double, double>> worst;  // by updated tensor: (max abs diff, max |reference|)
  for (int d = 0; d < exec.num_devices; ++d)
    for (const exec::Instruction& instruction : exec.programs[static_cast<std::size_t>(d)]) {
      const auto* load = std::get_if<exec::Load>(&instruction);
      if (load == nullptr) continue;
      const plan::SubTensor& loaded = exec.buffer(load->output).piece;
      const ir::TensorId next = updated[loaded.tensor.index()];
      if (!next.valid()) continue;  // not updated by the step (data, frozen parameters)
      const exec::BufferId* end = nullptr;
      for (const exec::BufferId& b : held[{d, next.value}]) {
        plan::SubTensor piece = exec.buffer(b).piece;
        piece.tensor = loaded.tensor;
        if (piece.value.is_whole() && plan::same_piece(piece, loaded, false)) end = &b;
      }
      if (end == nullptr)
        return fail(fmt::format("device {} loads {} of '{}' at the step's start, but ends the step without that piece of "
                                "'{}'",
                                d, loaded.to_string(), graph.tensor(loaded.tensor).name, graph.tensor(next).name),
                    "the ExecPlan does not close: its next step could not start from its end (plan/residence.h)");
      const NdArray want = detail::slice_strided(reference[next.index()], plan::normalized(loaded).box);
      const NdArray& got = run.held[end->index()];
      auto& [abs, scale] = worst[next.value];
      for (std::size_t i = 0; i < want.data.size() && i < got.data.size(); ++i) {
        const double diff = std::abs(want.data[i] - got.data[i]);
        abs = std::isnan(diff) ? INFINITY : std::max(abs, diff);
        scale = std::max(scale, std::abs(want.data[i]));
      }
      ++closed.pieces;
    }
  for (const auto& [tensor, stat] : worst) {
    const auto [abs, scale] = stat;
    const double denominator = std::max(scale, floor);
    const double rel = abs == 0 ? 0.0 : (denominator == 0 ? INFINITY : abs / denominator);
    closed.error.max_abs = std::max(closed.error.max_abs, abs);
    if (closed.error.worst.empty() || rel > closed.error.max_rel) {
      closed.error.max_rel = rel;
      closed.error.worst = graph.tensor(ir::TensorId(tensor)).name;
    }
  }
  return closed;
}

}  // namespace loom::verify
