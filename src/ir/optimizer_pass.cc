// add_optimizer: one optimizer op per parameter with a gradient. States live beside the parameter
// (role optimizer_state, owner = the parameter); the op writes SSA versions "<x>.updated" that
// point back through `updates`. Mixed precision (REFERENCE.md): a 16-bit parameter gets an fp32
// master copy, so bf16 AdamW holds 2 + 2 + 4 + 4 + 4 = 16 bytes per parameter.
#include "append_resolved_op.h"
#include "loom/ir/autograd.h"

namespace loom::ir {
namespace {

Expected<void> check_options(const OptimizerOptions& o) {
  if (!(o.lr > 0)) return fail(fmt::format("optimizer learning rate must be > 0, got {}", o.lr));
  if (o.kind == OptimizerKind::sgd) {
    if (!(o.momentum >= 0)) return fail(fmt::format("sgd momentum must be >= 0, got {}", o.momentum));
    return {};
  }
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1))
    return fail(fmt::format("{} betas must lie in [0, 1), got {} and {}", name(o.kind), o.beta1, o.beta2));
  if (!(o.eps > 0)) return fail(fmt::format("{} eps must be > 0, got {}", name(o.kind), o.eps));
  if (!(o.weight_decay >= 0)) return fail(fmt::format("weight decay must be >= 0, got {}", o.weight_decay));
  return {};
}

// Per tensor: the final gradient of each parameter. Partials are read by an "accumulate"; the
// final gradient is the one gradient of the parameter that none reads.
Expected<std::vector<TensorId>> final_gradients(const Graph& graph) {
  std::vector<char> summed(graph.tensors.size(), 0);
  for (const Op& op : graph.ops)
    if (op.type == "accumulate")
      for (TensorId in : op.inputs) summed[in.index()] = 1;
  std::vector<TensorId> gradient(graph.tensors.size());
  for (const FullTensor& t : graph.tensors) {
    if (t.role != TensorRole::gradient || !t.owner.valid() || summed[t.id.index()]) continue;
    if (graph.tensor(t.owner).role != TensorRole::parameter) continue;
    TensorId& slot = gradient[t.owner.index()];
    if (slot.valid())
      return fail(fmt::format("parameter '{}' has two final gradients, '{}' and '{}'", graph.tensor(t.owner).name,
                              graph.tensor(slot).name, t.name),
                  "partial gradients must be summed by one 'accumulate' op");
    slot = t.id;
  }
  return gradient;
}

Attrs optimizer_attrs(const OptimizerOptions& o, bool master) {
  Attrs attrs{{"lr", o.lr}, {"master_weights", master}};
  if (o.kind == OptimizerKind::sgd) {
    attrs.emplace("momentum", o.momentum);
    return attrs;
  }
  attrs.emplace("beta1", o.beta1);
  attrs.emplace("beta2", o.beta2);
  attrs.emplace("eps", o.eps);
  if (o.kind == OptimizerKind::adamw) attrs.emplace("weight_decay", o.weight_decay);
  return attrs;
}

std::vector<std::string> state_suffixes(const OptimizerOptions& o, DType param_dtype) {
  std::vector<std::string> suffixes;
  if (o.master_weights && is_floating(param_dtype) && size_bytes(param_dtype) == 2) suffixes.push_back("master");
  if (o.kind == OptimizerKind::sgd) {
    if (o.momentum > 0) suffixes.push_back("momentum");
  } else {
    suffixes.push_back("exp_avg");
    suffixes.push_back("exp_avg_sq");
  }
  return suffixes;
}

Expected<void> append_step(Graph& graph, const OpCatalog& catalog, const OptimizerOptions& options, TensorId param,
                           TensorId gradient) {
  // Copied: adding tensors may reallocate the tensor vector.
  const FullTensor p = graph.tensor(param);
  const std::vector<std::string> suffixes = state_suffixes(options, p.dtype);
  Op step;
  step.name = fmt::format("{}.{}", p.name, name(options.kind));
  step.type = std::string(name(options.kind));
  step.pass = Pass::optimizer;
  step.attrs = optimizer_attrs(options, !suffixes.empty() && suffixes.front() == "master");
  step.inputs = {param, gradient};
  std::vector<OutputTensor> outputs = {{p.name + ".updated", TensorRole::parameter, {}, param}};
  for (const std::string& suffix : suffixes) {
    const std::string state_name = p.name + "." + suffix;
    const TensorId state =
        graph.add_tensor(FullTensor{{}, state_name, p.shape, DType::f32, TensorRole::optimizer_state, param, {}});
    step.inputs.push_back(state);
    outputs.push_back({state_name + ".updated", TensorRole::optimizer_state, param, state});
  }
  LOOM_RETURN_IF_ERROR(append_resolved_op(graph, catalog, std::move(step), outputs));
  return {};
}

}  // namespace

Expected<Graph> add_optimizer(const Graph& with_backward, const OpCatalog& catalog, const OptimizerOptions& options) {
  LOOM_RETURN_IF_ERROR(check_options(options));
  LOOM_RETURN_IF_ERROR(with_context(check_structure(with_backward), fmt::format("graph '{}'", with_backward.name)));
  for (const Op& op : with_backward.ops)
    if (op.pass == Pass::optimizer)
      return fail(fmt::format("graph '{}' already has optimizer op '{}'", with_backward.name, op.name),
                  "add the optimizer once");
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> gradient, final_gradients(with_backward));

  Graph graph = with_backward;
  bool any = false;
  for (TensorId param : with_backward.parameters) {
    if (!gradient[param.index()].valid()) continue;  // unused or frozen: nothing to update
    any = true;
    LOOM_RETURN_IF_ERROR(append_step(graph, catalog, options, param, gradient[param.index()]));
  }
  if (!any)
    return fail(fmt::format("graph '{}' has no parameter gradients to apply", with_backward.name),
                "run add_backward first");
  return graph;
}

}  // namespace loom::ir
