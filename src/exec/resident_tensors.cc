#include "resident_tensors.h"

#include <set>

#include "loom/plan/recompute.h"
#include "move_pieces.h"
#include "step_closing.h"

namespace loom::exec::detail {

using plan::SubTensor;

ResidentTensors::ResidentTensors(const plan::Plan& plan, ProgramBuilder& builder, const SearchContext& search,
                                 const std::vector<std::vector<BufferId>>& written, bool use_layout_search)
    : plan_(plan), builder_(builder), search_(search), written_(written), use_layout_search_(use_layout_search),
      accumulator_(plan, builder), pieces_(plan::all_resident_pieces(plan)) {
  const ir::Graph& graph = *plan.graph;
  buffers_.resize(pieces_.size());
  held_.resize(pieces_.size());
  remaining_.resize(pieces_.size());
  for (const ir::FullTensor& t : graph.tensors) {
    buffers_[t.id.index()].resize(pieces_[t.id.index()].size());
    held_[t.id.index()] = plan::persists(graph, t.id) || !pieces_[t.id.index()].empty();
  }
  for (const plan::SubOp& s : plan.sub_ops)
    if (s.live)
      for (const SubTensor& out : s.outputs) ++remaining_[out.tensor.index()];
  use_.resize(plan.sub_ops.size());
  for (const std::vector<plan::SubOpId>& parts : plan.parts) {
    std::map<int, std::uint32_t> seen;  // by device
    for (plan::SubOpId id : parts) use_[id.index()] = seen[plan.sub_op(id).device]++;
  }
  find_groups();
  // The step starts with every persistent piece in place: what a device holds between steps.
  for (const ir::FullTensor& t : graph.tensors)
    if (plan::persists(graph, t.id))
      for (std::size_t i = 0; i < pieces_[t.id.index()].size(); ++i) loaded(t.id.index(), i);
}

void ResidentTensors::find_groups() {
  groups_.resize(pieces_.size());
  std::vector<std::vector<ProducedPart>> produced(pieces_.size());  // by tensor
  for (const plan::SubOp& s : plan_.sub_ops)
    if (s.live)
      for (const SubTensor& out : s.outputs) produced[out.tensor.index()].push_back({s.device, out.value});
  for (std::size_t t = 0; t < pieces_.size(); ++t) {
    const ir::TensorId tensor{static_cast<std::uint32_t>(t)};
    if (pieces_[t].empty() || plan::persists(*plan_.graph, tensor)) continue;
    std::set<int> holders;
    for (const plan::ResidentPiece& r : pieces_[t]) holders.insert(r.device);
    Groups& g = groups_[t];
    g.groups = gradient_groups(produced[t], holders);
    if (g.groups.count == 1) continue;
    g.remaining.assign(static_cast<std::size_t>(g.groups.count), 0);
    for (const ProducedPart& p : produced[t]) ++g.remaining[static_cast<std::size_t>(g.groups.of(p.value))];
    g.reduced.resize(pieces_[t].size());
    accumulator_.skip(tensor);
  }
}

Expected<void> ResidentTensors::reduce_group(std::size_t tensor, std::int64_t group) {
  Groups& g = groups_[tensor];
  const plan::ValuePart frame{group, g.groups.count};
  std::vector<BufferId> sources;
  for (BufferId b : written_[tensor])
    if (g.groups.of(builder_.piece(b).value) == group) sources.push_back(b);
  std::vector<PlacedPiece> needs;
  for (const plan::ResidentPiece& r : pieces_[tensor]) {
    needs.push_back({r.device, r.piece});
    needs.back().piece.value = frame;
  }
  LOOM_ASSIGN_OR_RETURN(const std::vector<BufferId> moved,
                        move_pieces(builder_, search_, sources, needs, use_layout_search_));
  for (std::size_t i = 0; i < moved.size(); ++i) {
    accumulator_.add_part(moved[i], g.groups.count);
    g.reduced[i].push_back(moved[i]);
  }
  return {};
}

BufferId ResidentTensors::group_sum(std::size_t tensor, std::size_t index) {
  const plan::ResidentPiece& r = pieces_[tensor][index];
  return builder_.combine(r.device, accumulator_.current(groups_[tensor].reduced[index]), r.piece);
}

BufferId ResidentTensors::loaded(std::size_t tensor, std::size_t index) {
  BufferId& b = buffers_[tensor][index];
  if (!b.valid()) b = builder_.load(pieces_[tensor][index].device, pieces_[tensor][index].piece);
  return b;
}

Expected<BufferId> ResidentTensors::resident_containing(int device, const SubTensor& piece) {
  const std::size_t t = piece.tensor.index();
  const bool persistent = plan::persists(*plan_.graph, piece.tensor);
  for (std::size_t i = 0; i < pieces_[t].size(); ++i) {
    const plan::ResidentPiece& r = pieces_[t][i];
    if (r.device != device || !plan::contains(r.piece, piece)) continue;
    if (persistent) return loaded(t, i);
    if (!buffers_[t][i].valid())
      return failf("gradient '{}' is read on device {} before all of it is produced", plan_.graph->tensor(piece.tensor).name,
                   device);
    return buffers_[t][i];
  }
  return BufferId{};
}

Expected<std::vector<BufferId>> ResidentTensors::sources(ir::TensorId tensor) {
  if (!plan::persists(*plan_.graph, tensor)) return current(written_[tensor.index()]);
  std::vector<BufferId> all;
  for (std::size_t i = 0; i < pieces_[tensor.index()].size(); ++i) all.push_back(loaded(tensor.index(), i));
  return all;
}

Expected<void> ResidentTensors::gather_for(const GatherKey& key) {
  NeedMap<BufferId>& gathered = gathered_[key];
  const auto& [op, tensor_value, use, rerun] = key;
  const ir::TensorId tensor{tensor_value};
  std::vector<PlacedPiece> needs;
  const plan::OpLayout& layout = plan_.layouts[op];
  for (plan::SubOpId id : plan_.parts[op]) {
    if (use_[id.index()] != use || (rerun && !plan::is_recomputed(plan_, id))) continue;
    const plan::SubOp& s = plan_.sub_op(id);
    for (std::size_t i = 0; i < s.inputs.size(); ++i) {
      if (s.inputs[i].tensor != tensor || layout.shape_only(i)) continue;
      SubTensor whole = plan::normalized(s.inputs[i]);
      whole.value = plan::ValuePart::whole();
      LOOM_ASSIGN_OR_RETURN(BufferId local, resident_containing(s.device, whole));
      if (local.valid() || gathered.contains(NeedView{s.device, &whole})) continue;
      gathered.emplace(NeedKey{s.device, whole}, BufferId{});
      needs.push_back({s.device, std::move(whole)});
    }
  }
  LOOM_ASSIGN_OR_RETURN(const std::vector<BufferId> from, sources(tensor));
  LOOM_ASSIGN_OR_RETURN(const std::vector<BufferId> moved,
                        move_pieces(builder_, search_, from, needs, use_layout_search_));
  for (std::size_t n = 0; n < needs.size(); ++n) gathered[NeedKey{needs[n].device, needs[n].piece}] = moved[n];
  return {};
}

Expected<BufferId> ResidentTensors::need(const plan::SubOp& consumer, const SubTensor& piece, bool rerun) {
  const NeedView view{consumer.device, &piece};
  if (auto it = derived_.find(view); it != derived_.end()) return it->second;
  const SubTensor target = plan::normalized(piece);
  LOOM_ASSIGN_OR_RETURN(BufferId local, resident_containing(consumer.device, target));
  if (local.valid()) {
    BufferId b = builder_.slice(local, target.box);
    if (!target.value.is_whole()) b = builder_.scale(b, target.value);
    derived_.emplace(NeedKey{consumer.device, target}, b);
    return b;
  }
  // Not resident here: gathered once for all parts of the reading op in this use, which alone read it.
  const GatherKey key{consumer.op.value, piece.tensor.value, use_[consumer.id.index()], rerun};
  if (!gathered_.contains(key)) LOOM_RETURN_IF_ERROR(gather_for(key));
  NeedMap<BufferId>& gathered = gathered_[key];
  if (auto it = gathered.find(view); it != gathered.end()) return it->second;
  SubTensor whole = target;
  whole.value = plan::ValuePart::whole();
  const auto it = gathered.find(NeedView{consumer.device, &whole});
  if (it == gathered.end() || !it->second.valid())
    return failf("{} of '{}' was not gathered on device {}", target.to_string(), plan_.graph->tensor(piece.tensor).name,
                 consumer.device);
  const BufferId scaled = builder_.scale(it->second, target.value);
  gathered.emplace(NeedKey{consumer.device, target}, scaled);
  return scaled;
}

Expected<void> ResidentTensors::produced(const plan::SubOp& s) {
  const ir::Graph& graph = *plan_.graph;
  std::vector<BufferId> outputs;  // the caller has just appended them to written_
  for (const SubTensor& out : s.outputs) outputs.push_back(written_[out.tensor.index()].back());
  accumulator_.produced(s, outputs);
  for (const SubTensor& out : s.outputs) {
    const std::size_t t = out.tensor.index();
    Groups& g = groups_[t];
    const bool grouped = g.groups.count > 1;
    if (grouped) {  // a group of its partial sums complete: reduce it into the resident pieces now
      const std::int64_t group = g.groups.of(out.value);
      if (--g.remaining[static_cast<std::size_t>(group)] == 0) LOOM_RETURN_IF_ERROR(reduce_group(t, group));
    }
    if (--remaining_[t] != 0) continue;
    if (held_[t] != 0 && grouped) {
      for (std::size_t i = 0; i < pieces_[t].size(); ++i) buffers_[t][i] = group_sum(t, i);
    } else if (held_[t] != 0) {  // a final gradient with resident pieces: reduce it into them now
      std::vector<PlacedPiece> needs;
      for (const plan::ResidentPiece& r : pieces_[t]) needs.push_back({r.device, r.piece});
      LOOM_ASSIGN_OR_RETURN(buffers_[t], move_pieces(builder_, search_, current(written_[t]), needs, use_layout_search_));
    }
    const ir::TensorId x = graph.tensor(out.tensor).updates;
    if (x.valid() && plan::persists(graph, x))
      LOOM_RETURN_IF_ERROR(with_context(
          close_step(builder_, search_, out.tensor, written_[t], pieces_[x.index()], use_layout_search_),
          fmt::format("closing the step of '{}'", graph.tensor(x).name)));
  }
  return {};
}

}  // namespace loom::exec::detail
