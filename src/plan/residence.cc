#include "loom/plan/residence.h"

#include <algorithm>

#include <fmt/format.h>

namespace loom::plan {
namespace {

// The optimizer op reading `tensor` as its parameter (input 0); invalid when none.
const ir::Op* optimizer_of(const ir::Graph& graph, ir::TensorId parameter) {
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::optimizer && !op.inputs.empty() && op.inputs.front() == parameter) return &op;
  return nullptr;
}

bool is_final_gradient(const ir::Graph& graph, ir::TensorId tensor) {
  const ir::FullTensor& t = graph.tensor(tensor);
  return t.role == ir::TensorRole::gradient && t.owner.valid() && final_gradient(graph, t.owner) == tensor;
}

// Per device, the distinct boxes no other box of that device contains, sorted by device and box.
std::vector<ResidentPiece> maximal(std::vector<ResidentPiece> pieces) {
  for (ResidentPiece& p : pieces) p.piece = normalized(std::move(p.piece));
  const auto key = [](const ResidentPiece& p) { return std::tie(p.device, p.piece.box); };
  std::ranges::sort(pieces, [&](const ResidentPiece& a, const ResidentPiece& b) { return key(a) < key(b); });
  pieces.erase(std::unique(pieces.begin(), pieces.end()), pieces.end());
  std::vector<ResidentPiece> kept;
  for (const ResidentPiece& p : pieces) {
    const bool inside = std::ranges::any_of(pieces, [&](const ResidentPiece& q) {
      return q.device == p.device && !(q == p) && contains(q.piece, p.piece);
    });
    if (!inside) kept.push_back(p);
  }
  return kept;
}

}  // namespace

std::string_view name(Residence residence) {
  switch (residence) {
    case Residence::consumers: return "consumers";
    case Residence::optimizer_shards: return "optimizer shards";
  }
  return "?";
}

bool persists(const ir::Graph& graph, ir::TensorId tensor) {
  const ir::FullTensor& t = graph.tensor(tensor);
  if (t.updates.valid()) return false;
  if (t.role == ir::TensorRole::parameter || t.role == ir::TensorRole::optimizer_state) return true;
  // A buffer persists when the step writes a new version of it (batch norm's running statistics).
  return t.role == ir::TensorRole::buffer && updated_version(graph, tensor).valid();
}

ir::TensorId updated_version(const ir::Graph& graph, ir::TensorId tensor) {
  for (const ir::FullTensor& t : graph.tensors)
    if (t.updates == tensor) return t.id;
  return {};
}

ir::TensorId final_gradient(const ir::Graph& graph, ir::TensorId parameter) {
  const ir::Op* step = optimizer_of(graph, parameter);
  return step != nullptr && step->inputs.size() > 1 ? step->inputs[1] : ir::TensorId{};
}

Expected<void> set_residence(Plan& plan, ir::TensorId tensor, Residence residence) {
  const ir::Graph& graph = *plan.graph;
  if (!tensor.valid() || tensor.index() >= graph.tensors.size()) return fail(fmt::format("residence: no tensor %{}", tensor.value));
  const ir::FullTensor& t = graph.tensor(tensor);
  const bool gradient = is_final_gradient(graph, tensor);
  if (!persists(graph, tensor) && !gradient)
    return fail(fmt::format("residence: '{}' ({}) is neither a parameter, an optimizer state nor a parameter's final "
                            "gradient",
                            t.name, ir::name(t.role)),
                "only tensors that outlive the sub-ops reading them have a residence");
  if (residence == Residence::optimizer_shards && !gradient && !updated_version(graph, tensor).valid())
    return fail(fmt::format("residence: no optimizer step updates '{}', so it has no optimizer shards", t.name),
                "keep a frozen tensor where its consumers read it");
  if (plan.residence.size() < graph.tensors.size()) plan.residence.resize(graph.tensors.size(), Residence::consumers);
  plan.residence[tensor.index()] = residence;
  return {};
}

Residence residence_of(const Plan& plan, ir::TensorId tensor) {
  return tensor.index() < plan.residence.size() ? plan.residence[tensor.index()] : Residence::consumers;
}

std::vector<std::vector<ResidentPiece>> all_resident_pieces(const Plan& plan) {
  const ir::Graph& graph = *plan.graph;
  std::vector<std::vector<ResidentPiece>> pieces(graph.tensors.size());
  const auto whole_valued = [](SubTensor piece, ir::TensorId as) {
    piece.tensor = as;
    piece.value = ValuePart::whole();
    return piece;
  };
  for (const SubOp& s : plan.sub_ops) {
    if (!s.live) continue;
    const OpLayout& layout = plan.layouts[s.op.index()];
    const bool optimizer = plan.op_of(s.id).pass == ir::Pass::optimizer;
    for (std::size_t i = 0; i < s.inputs.size(); ++i) {
      const ir::TensorId t = s.inputs[i].tensor;
      if (layout.shape_only(i)) continue;
      const bool held = persists(graph, t) ? residence_of(plan, t) == Residence::consumers
                                           : optimizer && residence_of(plan, t) == Residence::optimizer_shards;
      if (held) pieces[t.index()].push_back({s.device, whole_valued(s.inputs[i], t)});
    }
    if (!optimizer) continue;
    for (const SubTensor& out : s.outputs) {
      const ir::TensorId x = graph.tensor(out.tensor).updates;
      if (x.valid() && persists(graph, x) && residence_of(plan, x) == Residence::optimizer_shards)
        pieces[x.index()].push_back({s.device, whole_valued(out, x)});
    }
  }
  for (auto& list : pieces)
    if (!list.empty()) list = maximal(std::move(list));
  return pieces;
}

std::vector<ResidentPiece> resident_pieces(const Plan& plan, ir::TensorId tensor) {
  return all_resident_pieces(plan)[tensor.index()];
}

}  // namespace loom::plan
