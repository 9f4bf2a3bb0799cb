// add_backward: one mirrored backward op per forward op on a path from a parameter to the loss.
//
// Three linear sweeps over the ops, no per-tensor scans:
//   1. forward:  which tensors need a gradient (depend on a parameter through differentiable inputs);
//   2. reverse:  which tensors get one (reach the loss), which ops take part, and how many partial
//                gradients each tensor receives (one per reading position of a taking-part op);
//   3. reverse:  emit the backward ops; a tensor's partials are summed by one "accumulate" as soon as
//                the last one exists, which is before any backward op reads that gradient, because the
//                reader mirrors the tensor's producer and producers precede their consumers.
#include <algorithm>

#include "append_resolved_op.h"
#include "loom/ir/autograd.h"

namespace loom::ir {
namespace {

// Whether forward input `i` of `op` can receive a gradient at all.
bool may_receive_gradient(const OpDef& def, const Graph& graph, const Op& op, std::size_t i) {
  const auto& no_grad = def.backward.no_grad_inputs;
  if (std::find(no_grad.begin(), no_grad.end(), static_cast<int>(i)) != no_grad.end()) return false;
  return is_floating(graph.tensor(op.inputs[i]).dtype);
}

struct GradientPlan {
  std::vector<const OpDef*> defs;    // per op
  std::vector<char> needs_gradient;  // per tensor: depends on a parameter through differentiable inputs
  std::vector<char> has_gradient;    // per tensor: needs one and reaches the loss
  std::vector<char> takes_part;      // per op: gets a backward op
  std::vector<int> partial_count;    // per tensor: how many backward outputs are its partial gradients
};

Expected<GradientPlan> plan_gradients(const Graph& graph, const OpCatalog& catalog) {
  GradientPlan plan;
  const std::size_t n_tensors = graph.tensors.size();
  plan.needs_gradient.assign(n_tensors, 0);
  plan.has_gradient.assign(n_tensors, 0);
  plan.partial_count.assign(n_tensors, 0);
  plan.takes_part.assign(graph.ops.size(), 0);

  for (const Op& op : graph.ops) {
    if (op.pass != Pass::forward)
      return fail(fmt::format("graph '{}' already has {} op '{}'", graph.name, name(op.pass), op.name),
                  "add_backward takes a forward-only graph");
    const OpDef* def = catalog.find(op.type);
    if (def == nullptr)
      return fail(fmt::format("op '{}': op type '{}' is not in the catalog, so its backward rule is unknown",
                              op.name, op.type),
                  "register the op type (`loom ops` lists the known ones)");
    plan.defs.push_back(def);
  }

  for (TensorId p : graph.parameters)
    if (is_floating(graph.tensor(p).dtype)) plan.needs_gradient[p.index()] = 1;
  for (const Op& op : graph.ops) {
    const OpDef& def = *plan.defs[op.id.index()];
    if (!def.backward.differentiable) continue;
    bool depends = false;
    for (std::size_t i = 0; i < op.inputs.size() && !depends; ++i)
      depends = plan.needs_gradient[op.inputs[i].index()] && may_receive_gradient(def, graph, op, i);
    if (!depends) continue;
    for (TensorId out : op.outputs)
      if (is_floating(graph.tensor(out).dtype)) plan.needs_gradient[out.index()] = 1;
  }

  if (!plan.needs_gradient[graph.loss.index()])
    return fail(fmt::format("graph '{}': the loss '{}' does not depend on any parameter, so there is nothing to train",
                            graph.name, graph.tensor(graph.loss).name),
                "check that the parameters feed the loss through differentiable ops");
  plan.has_gradient[graph.loss.index()] = 1;

  for (std::size_t k = graph.ops.size(); k-- > 0;) {
    const Op& op = graph.ops[k];
    const OpDef& def = *plan.defs[k];
    if (!def.backward.differentiable) continue;
    const bool output_has_gradient = std::any_of(op.outputs.begin(), op.outputs.end(),
                                                 [&](TensorId t) { return plan.has_gradient[t.index()] != 0; });
    if (!output_has_gradient) continue;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const TensorId in = op.inputs[i];
      if (!plan.needs_gradient[in.index()] || !may_receive_gradient(def, graph, op, i)) continue;
      plan.takes_part[k] = 1;
      plan.has_gradient[in.index()] = 1;
      ++plan.partial_count[in.index()];
    }
  }
  return plan;
}

class BackwardEmitter {
 public:
  BackwardEmitter(Graph& graph, const OpCatalog& catalog, const GradientPlan& plan)
      : graph_(graph), catalog_(catalog), plan_(plan), gradient_(graph.tensors.size()), partials_(graph.tensors.size()),
        partials_named_(graph.tensors.size(), 0) {}

  Expected<void> seed_loss() {
    const TensorId loss = graph_.loss;
    const std::string loss_name = graph_.tensor(loss).name;
    Op seed;
    seed.name = loss_name + ".grad.seed";
    seed.type = "fill_like";
    seed.inputs = {loss};
    seed.attrs = {{"value", 1.0}};
    seed.pass = Pass::backward;
    const OutputTensor out{loss_name + ".grad", TensorRole::gradient, loss, {}};
    LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> ids, append_resolved_op(graph_, catalog_, std::move(seed), {&out, 1}));
    gradient_[loss.index()] = ids.front();
    return {};
  }

  Expected<void> mirror(OpId forward_id) {
    // Copies: appending to the graph may reallocate its op and tensor vectors.
    const Op forward = graph_.op(forward_id);
    const OpDef& def = *plan_.defs[forward_id.index()];

    Op backward;
    backward.name = forward.name + ".backward";
    backward.type = forward.type;
    backward.annotation = forward.annotation;
    backward.pass = Pass::backward;
    backward.mirror_of = forward.id;
    if (def.backward.saves_inputs) backward.inputs = forward.inputs;
    if (def.backward.saves_outputs)
      backward.inputs.insert(backward.inputs.end(), forward.outputs.begin(), forward.outputs.end());

    std::vector<std::int64_t> grad_outputs, grad_inputs;
    for (std::size_t j = 0; j < forward.outputs.size(); ++j) {
      const TensorId out = forward.outputs[j];
      if (!plan_.has_gradient[out.index()]) continue;
      if (!gradient_[out.index()].valid())
        return fail(fmt::format("internal: gradient of '{}' is read by '{}' before it is complete",
                                graph_.tensor(out).name, backward.name));
      grad_outputs.push_back(static_cast<std::int64_t>(j));
      backward.inputs.push_back(gradient_[out.index()]);
    }
    for (std::size_t i = 0; i < forward.inputs.size(); ++i) {
      const TensorId in = forward.inputs[i];
      if (!plan_.needs_gradient[in.index()] || !may_receive_gradient(def, graph_, forward, i)) continue;
      grad_inputs.push_back(static_cast<std::int64_t>(i));
      const FullTensor& target = graph_.tensor(in);
      const bool single = plan_.partial_count[in.index()] == 1;
      const std::string grad_name =
          single ? target.name + ".grad" : fmt::format("{}.grad.{}", target.name, partials_named_[in.index()]++);
      backward.outputs.push_back(
          graph_.add_tensor(FullTensor{{}, grad_name, target.shape, target.dtype, TensorRole::gradient, in, {}}));
    }
    backward.attrs = {{"grad_outputs", grad_outputs},
                      {"grad_inputs", grad_inputs},
                      {"saved_inputs", def.backward.saves_inputs},
                      {"saved_outputs", def.backward.saves_outputs}};
    const std::vector<TensorId> produced = backward.outputs;
    graph_.add_op(std::move(backward));

    for (std::size_t g = 0; g < produced.size(); ++g)
      LOOM_RETURN_IF_ERROR(record_partial(forward.inputs[static_cast<std::size_t>(grad_inputs[g])], produced[g]));
    return {};
  }

 private:
  // The final gradient is the partial itself when it is the only one, else their sum.
  Expected<void> record_partial(TensorId target, TensorId partial) {
    std::vector<TensorId>& parts = partials_[target.index()];
    parts.push_back(partial);
    if (static_cast<int>(parts.size()) < plan_.partial_count[target.index()]) return {};
    if (parts.size() == 1) {
      gradient_[target.index()] = partial;
      return {};
    }
    const std::string grad_name = graph_.tensor(target).name + ".grad";
    Op sum;
    sum.name = grad_name + ".accumulate";
    sum.type = "accumulate";
    sum.inputs = parts;
    sum.pass = Pass::backward;
    const OutputTensor out{grad_name, TensorRole::gradient, target, {}};
    LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> ids, append_resolved_op(graph_, catalog_, std::move(sum), {&out, 1}));
    gradient_[target.index()] = ids.front();
    parts = {};
    return {};
  }

  Graph& graph_;
  const OpCatalog& catalog_;
  const GradientPlan& plan_;
  std::vector<TensorId> gradient_;               // per forward tensor: its final gradient
  std::vector<std::vector<TensorId>> partials_;  // per forward tensor: partials so far
  std::vector<int> partials_named_;              // per forward tensor: partial names handed out
};

}  // namespace

Expected<Graph> add_backward(const Graph& forward, const OpCatalog& catalog) {
  if (!forward.loss.valid())
    return fail(fmt::format("graph '{}' has no loss to differentiate", forward.name),
                "mark the scalar loss (GraphBuilder::set_loss)");
  LOOM_RETURN_IF_ERROR(with_context(check_structure(forward), fmt::format("graph '{}'", forward.name)));
  LOOM_ASSIGN_OR_RETURN(GradientPlan plan, plan_gradients(forward, catalog));

  Graph graph = forward;
  BackwardEmitter emitter(graph, catalog, plan);
  LOOM_RETURN_IF_ERROR(emitter.seed_loss());
  for (std::size_t k = forward.ops.size(); k-- > 0;)
    if (plan.takes_part[k]) LOOM_RETURN_IF_ERROR(emitter.mirror(forward.ops[k].id));
  return graph;
}

}  // namespace loom::ir
