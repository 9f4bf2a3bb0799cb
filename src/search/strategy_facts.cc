// Each forward op under each strategy, read off plans the primitives made (strategy_facts.h).
#include "strategy_facts.h"

#include <algorithm>

#include "loom/cost/compute_model.h"
#include "loom/plan/batch.h"
#include "loom/plan/plan.h"

namespace loom::search::detail {
namespace {

using plan::Plan;
using plan::SubOpId;

// Per axis: each identifier trans may split (not frozen, not a later atom of a merged dimension), then
// replication; over two axes every pair.
std::vector<OpStrategy> candidates_of(const plan::OpLayout& layout, const DeviceMesh& mesh) {
  std::vector<std::optional<std::string>> per_axis;
  for (const std::string& x : layout.annotation.identifiers())
    if (layout.annotation.flag_of(x) != ir::DimFlag::frozen && !plan::inside_merged_dim(layout.annotation, x))
      per_axis.emplace_back(x);
  per_axis.emplace_back(std::nullopt);
  std::vector<OpStrategy> out{OpStrategy{}};
  for (std::size_t axis = 0; axis < mesh.axes.size(); ++axis) {
    std::vector<OpStrategy> next;
    for (const OpStrategy& prefix : out)
      for (const auto& x : per_axis) {
        OpStrategy s = prefix;
        s.axes.push_back(x);
        next.push_back(std::move(s));
      }
    out = std::move(next);
  }
  return out;
}

std::int64_t local_bytes(const ir::Graph& graph, const plan::SubTensor& piece) {
  return piece.numel() * ir::size_bytes(graph.tensor(piece.tensor).dtype);
}

// The pieces of input (or output) `index` of each part, by device.
template <class Select>
MaybeLayout layout_over(const Plan& plan, const std::vector<SubOpId>& parts, const ir::Shape& shape, Select select) {
  std::vector<plan::SubTensor> pieces;
  pieces.reserve(parts.size());
  for (SubOpId part : parts) pieces.push_back(select(plan.sub_op(part)));
  return layout_of_pieces(pieces, shape);
}

// Index of the gradient of `of` among the backward op's inputs (or outputs); -1 when it has none.
int gradient_index(const ir::Graph& graph, const std::vector<ir::TensorId>& tensors, ir::TensorId of) {
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const ir::FullTensor& t = graph.tensor(tensors[k]);
    if (t.role == ir::TensorRole::gradient && t.owner == of) return static_cast<int>(k);
  }
  return -1;
}

class RoundReader {
 public:
  RoundReader(const Plan& plan, const ir::OpCatalog& catalog, const cost::ComputeModel& compute)
      : plan_(plan), catalog_(catalog), graph_(*plan.graph), compute_(compute) {}

  // The facts of `op` whose parts (by device) are `parts`. By forward input: `owned`, the parameters it
  // reads first; `steps`, their optimizer steps' parts (empty for a parameter without one).
  StrategyFacts read(const ir::Op& op, const std::vector<SubOpId>& parts, const std::vector<char>& owned,
                     const std::vector<std::vector<SubOpId>>& steps) const {
    StrategyFacts f;
    f.valid = true;
    const plan::OpLayout& layout = plan_.layouts[op.id.index()];
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      if (layout.shape_only(i)) {
        f.inputs.emplace_back();
        continue;
      }
      f.inputs.push_back(expect_layout(f, parts, op.inputs[i], [i](const plan::SubOp& s) { return s.inputs[i]; }));
    }
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      f.outputs.push_back(expect_layout(f, parts, op.outputs[j], [j](const plan::SubOp& s) { return s.outputs[j]; }));
    read_gradients(op, parts, f);
    const plan::SubOp& first = plan_.sub_op(parts.front());
    f.compute_seconds = compute_.seconds(parts.front()) + (first.mirror.valid() ? compute_.seconds(first.mirror) : 0);
    for (const plan::SubTensor& out : first.outputs) f.activation_bytes += local_bytes(graph_, out);
    if (first.mirror.valid() && saves_inputs(op))
      for (std::size_t i = 0; i < op.inputs.size(); ++i)
        if (f.inputs[i] && graph_.tensor(op.inputs[i]).role != ir::TensorRole::parameter)
          f.activation_bytes += local_bytes(graph_, first.inputs[i]);
    f.kept_parameters.resize(op.inputs.size());
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (!owned[i]) continue;
      if (steps[i].empty()) {  // no optimizer step: the parameter stays as read, with its gradient beside it
        f.kept_parameters[i] = f.inputs[i];
        f.state_bytes += 2 * local_bytes(graph_, first.inputs[i]);
        continue;
      }
      const plan::SubOp& step = plan_.sub_op(steps[i].front());
      f.kept_parameters[i] = expect_layout(f, steps[i], op.inputs[i], [](const plan::SubOp& s) { return s.inputs[0]; });
      f.compute_seconds += compute_.seconds(steps[i].front());
      for (const plan::SubTensor& in : step.inputs) {
        const ir::TensorRole role = graph_.tensor(in.tensor).role;
        if (role == ir::TensorRole::parameter || role == ir::TensorRole::gradient ||
            role == ir::TensorRole::optimizer_state)
          f.state_bytes += local_bytes(graph_, in);
      }
    }
    return f;
  }

 private:
  template <class Select>
  MaybeLayout expect_layout(StrategyFacts& f, const std::vector<SubOpId>& parts, ir::TensorId tensor,
                            Select select) const {
    MaybeLayout layout = layout_over(plan_, parts, graph_.tensor(tensor).shape, select);
    if (!layout) f.valid = false;
    return layout;
  }

  // The gradients the backward parts read (of outputs) and write (of inputs); none without a backward.
  void read_gradients(const ir::Op& op, const std::vector<SubOpId>& parts, StrategyFacts& f) const {
    f.input_grads.resize(op.inputs.size());
    f.output_grads.resize(op.outputs.size());
    std::vector<SubOpId> backward;
    for (SubOpId part : parts) {
      if (!plan_.sub_op(part).mirror.valid()) return;
      backward.push_back(plan_.sub_op(part).mirror);
    }
    const ir::Op& mirror = plan_.op_of(backward.front());
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      if (const int k = gradient_index(graph_, mirror.inputs, op.outputs[j]); k >= 0)
        f.output_grads[j] = expect_layout(f, backward, op.outputs[j], [k](const plan::SubOp& s) {
          return s.inputs[static_cast<std::size_t>(k)];
        });
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      if (const int k = gradient_index(graph_, mirror.outputs, op.inputs[i]); k >= 0)
        f.input_grads[i] = expect_layout(f, backward, op.inputs[i], [k](const plan::SubOp& s) {
          return s.outputs[static_cast<std::size_t>(k)];
        });
  }

  // Whether the op's backward reads its forward inputs, so the pieces the op reads live until then.
  bool saves_inputs(const ir::Op& op) const {
    const ir::OpDef* def = catalog_.find(op.type);
    return def == nullptr || def->backward.saves_inputs;
  }

  const Plan& plan_;
  const ir::OpCatalog& catalog_;
  const ir::Graph& graph_;
  const cost::ComputeModel& compute_;
};

}  // namespace

Expected<std::vector<OpFacts>> gather_facts(const Plan& fresh, const ir::OpCatalog& catalog, const DeviceMesh& mesh,
                                            const cluster::GpuSpec& gpu, const cost::ProfileDb* profile) {
  const ir::Graph& graph = *fresh.graph;
  std::vector<OpFacts> facts(graph.ops.size());
  std::size_t rounds = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    OpFacts& f = facts[op.id.index()];
    f.candidates = candidates_of(fresh.layouts[op.id.index()], mesh);
    f.facts.resize(f.candidates.size());
    rounds = std::max(rounds, f.candidates.size());
  }
  const std::vector<ir::OpId> first_reader = first_parameter_readers(fresh);
  std::vector<ir::OpId> step_of(graph.tensors.size());  // by parameter: its optimizer step
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::optimizer && !op.inputs.empty()) step_of[op.inputs.front().index()] = op.id;

  for (std::size_t round = 0; round < rounds; ++round) {
    Plan plan = fresh;
    struct Sharded {
      ir::OpId op;
      std::vector<SubOpId> parts;
      std::vector<char> owned;
      std::vector<std::vector<SubOpId>> steps;
    };
    std::vector<Sharded> sharded;
    for (const ir::Op& op : graph.ops) {
      if (op.pass != ir::Pass::forward || round >= facts[op.id.index()].candidates.size()) continue;
      const OpStrategy& strategy = facts[op.id.index()].candidates[round];
      const SubOpId whole = fresh.parts[op.id.index()].front();
      Expected<std::vector<SubOpId>> parts = shard_op(plan, whole, strategy, mesh);
      if (!parts) continue;  // a strategy the op refuses stays invalid
      Sharded s{op.id, std::move(*parts), std::vector<char>(op.inputs.size()),
                std::vector<std::vector<SubOpId>>(op.inputs.size())};
      bool steps_placed = true;
      for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        const ir::TensorId t = op.inputs[i];
        const auto earlier = op.inputs.begin() + static_cast<std::ptrdiff_t>(i);
        if (first_reader[t.index()] != op.id || std::find(op.inputs.begin(), earlier, t) != earlier) continue;
        s.owned[i] = 1;
        if (!step_of[t.index()].valid()) continue;
        Expected<std::vector<SubOpId>> steps =
            shard_follower(plan, fresh.parts[step_of[t.index()].index()].front(),
                           tensor_split(fresh, whole, false, i, strategy), mesh);
        if (!steps) {
          steps_placed = false;
          break;
        }
        s.steps[i] = std::move(*steps);
      }
      if (steps_placed) sharded.push_back(std::move(s));
    }
    LOOM_ASSIGN_OR_RETURN(const cost::ComputeModel compute, cost::ComputeModel::make(plan, catalog, gpu, profile));
    const RoundReader reader(plan, catalog, compute);
    for (const Sharded& s : sharded)
      facts[s.op.index()].facts[round] = reader.read(graph.op(s.op), s.parts, s.owned, s.steps);
  }
  return facts;
}

}  // namespace loom::search::detail
