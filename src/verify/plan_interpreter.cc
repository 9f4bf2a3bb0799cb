#include "loom/verify/plan_interpreter.h"

#include "loom/plan/validate.h"
#include "plan_assembly.h"
#include "sub_op_runner.h"

namespace loom::verify {
namespace {

using plan::SubOp;
using plan::SubTensor;

// Everything a running plan reads from: the graph, its leaves, and the pieces written so far.
struct State {
  const plan::Plan& plan;
  const std::vector<NdArray>& initial;
  std::vector<ir::OpId> producer;
  PlanRun run;

  const ir::Graph& graph() const { return *plan.graph; }

  Expected<NdArray> read(const SubTensor& t) const {
    if (producer[t.tensor.index()].valid())
      return detail::assemble(t, run.pieces[t.tensor.index()], graph().tensor(t.tensor).name);
    return detail::read_leaf(graph(), initial, t);
  }
};

Expected<void> run_part(State& state, const SubOp& s, const KernelRegistry& kernels) {
  LOOM_ASSIGN_OR_RETURN(std::vector<NdArray> outputs,
                        detail::run_sub_op(state.plan, s, kernels, [&](std::size_t i) { return state.read(s.inputs[i]); }));
  for (std::size_t k = 0; k < s.outputs.size(); ++k)
    state.run.pieces[s.outputs[k].tensor.index()].push_back(PlanPiece{s.outputs[k], std::move(outputs[k])});
  return {};
}

}  // namespace

Expected<PlanRun> run_plan(const plan::Plan& plan, int num_devices, const std::vector<NdArray>& initial,
                           const KernelRegistry& kernels) {
  if (plan.graph == nullptr) return fail("the plan has no graph");
  LOOM_ASSIGN_OR_RETURN(plan::ExecutionOrder order, plan::complete_order(plan, num_devices));
  const ir::Graph& graph = *plan.graph;
  State state{plan, initial, ir::producers(graph), {}};
  state.run.pieces.resize(graph.tensors.size());
  for (plan::SubOpId id : order.global) LOOM_RETURN_IF_ERROR(run_part(state, plan.sub_op(id), kernels));

  LOOM_ASSIGN_OR_RETURN(state.run.values, detail::assemble_values(graph, initial, state.run.pieces));
  return std::move(state.run);
}

}  // namespace loom::verify
