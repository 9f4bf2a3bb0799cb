#include "layout_transition.h"

#include <algorithm>
#include <map>
#include <utility>

#include "loom/core/disjoint_sets.h"

namespace loom::exec::detail {
namespace {

using Holding = std::map<int, BufferId>;  // device -> the buffer it holds of the moving tensor

// The budget of a search of collectives alone, in states, per weighted state of the first search's
// budget: such a state costs a fraction of one with the p2p edge (which pairs every consumer device with
// the holders), and the hierarchical plan on 64 devices needs ~900 of them.
constexpr std::int64_t kCollectiveStatesPerState = 2;

// `part` as a part of `frame` (the inverse of plan::nested); nullopt when it does not lie inside it.
std::optional<plan::ValuePart> within(plan::ValuePart frame, plan::ValuePart part) {
  if (part.count % frame.count != 0) return std::nullopt;
  const std::int64_t per = part.count / frame.count;
  if (part.index / per != frame.index) return std::nullopt;
  return plan::ValuePart{part.index % per, per};
}

struct StepContext {
  ProgramBuilder& builder;
  const cluster::Cluster& cluster;
  ir::TensorId tensor;
  std::span<const plan::IndexRange> region;
  plan::ValuePart frame;  // the value part of the tensor that moves (whole, or e.g. one micro-batch's sum)
  std::int64_t search = -1;  // ConcurrentSteps::begin_search's number of this search
  std::size_t index = 0;     // the step being lowered, by its place in the search's plan

  // The piece the device at `position` of `layout` holds: its box, and its value part of the frame.
  plan::SubTensor piece(const comm::Layout& layout, std::size_t position) const {
    plan::SubTensor piece = piece_at(layout, position, tensor, region);
    piece.value = plan::nested(frame, piece.value);
    return piece;
  }
};

Expected<BufferId> held(const Holding& holding, int device) {
  const auto it = holding.find(device);
  if (it == holding.end()) return failf("device {} holds nothing of the tensor before this step", device);
  return it->second;
}

Expected<Holding> lower_collective(const StepContext& ctx, const comm::PlannedStep& planned, const Holding& holding) {
  const comm::Layout& after = planned.after;
  std::map<int, std::size_t> position;
  for (std::size_t p = 0; p < after.devices.size(); ++p) position[after.devices[p]] = p;
  Holding next;
  for (int d : after.devices)
    if (holding.contains(d)) next[d] = holding.at(d);
  // The step's groups run at once and share the nodes' NICs: each collective names them all, so the
  // simulator prices it as the search priced the step.
  const std::int64_t step = ctx.builder.group_step(planned.step.groups);
  std::vector<std::int64_t> tags;
  for (const std::vector<int>& group : planned.step.groups) {
    std::vector<BufferId> inputs;
    std::vector<plan::SubTensor> outputs;
    for (int member : group) {
      LOOM_ASSIGN_OR_RETURN(BufferId in, held(holding, member));
      if (!position.contains(member)) return failf("collective member {} is not in the layout after the step", member);
      inputs.push_back(in);
      outputs.push_back(ctx.piece(after, position.at(member)));
    }
    const std::vector<BufferId> out =
        ctx.builder.collective(planned.step.primitive, group, inputs, outputs, ctx.tensor, planned.step.rule, step);
    for (std::size_t i = 0; i < group.size(); ++i) next[group[i]] = out[i];
    tags.push_back(static_cast<std::int64_t>(ctx.builder.exec().collectives.size()) - 1);  // the one just issued
  }
  ctx.builder.concurrent().lowered(ctx.search, ctx.index, planned.step.primitive, planned.step.groups, std::move(tags));
  return next;
}

// The offset of a p2p step's receiver from its sender, which orders every member's sends and receives.
// Over one node, a ring over the new layout's positions: member i sends to i + 1, i + 2, ... and receiver
// j takes from j - 1, j - 2, .... Over several nodes that hold as many of the layout's devices each, the
// offset on the torus of nodes x ranks (each device's node among the layout's nodes, and its rank among
// their devices on that node, both by id): (node offset, rank offset), node first. The ring over positions
// sent node 0's first device its first part within its node and node 1's across nodes (ZeRO's node-major
// shards), so no node's programs stood for another's in a folded step (fold_classes.h); on the torus every
// node's members send alike. A sender outside the layout comes last.
class SendOrder {
 public:
  SendOrder(const std::vector<int>& devices, const cluster::Cluster& cluster) : n_(static_cast<std::ptrdiff_t>(devices.size())) {
    std::map<int, std::vector<int>> by_node;
    for (int d : devices) by_node[cluster.node_of(d)].push_back(d);
    const std::size_t per_node = by_node.begin()->second.size();
    const bool torus = by_node.size() > 1 && std::ranges::all_of(by_node, [&](const auto& node) { return node.second.size() == per_node; });
    if (torus) {
      nodes_ = static_cast<std::ptrdiff_t>(by_node.size());
      ranks_ = static_cast<std::ptrdiff_t>(per_node);
      std::ptrdiff_t node = 0;
      for (auto& [id, members] : by_node) {
        std::ranges::sort(members);
        for (std::size_t rank = 0; rank < members.size(); ++rank) at_[members[rank]] = {node, static_cast<std::ptrdiff_t>(rank)};
        ++node;
      }
    } else {
      for (std::size_t p = 0; p < devices.size(); ++p) at_[devices[p]] = {0, static_cast<std::ptrdiff_t>(p)};
      nodes_ = 1;
      ranks_ = n_;
    }
  }

  // In [0, n), 0 for the receiver itself; n for a sender outside the layout.
  std::ptrdiff_t distance(int from, int to) const {
    const auto f = at_.find(from);
    if (f == at_.end()) return n_;
    const auto& [from_node, from_rank] = f->second;
    const auto& [to_node, to_rank] = at_.at(to);
    return wrap(to_node - from_node, nodes_) * ranks_ + wrap(to_rank - from_rank, ranks_);
  }

 private:
  static std::ptrdiff_t wrap(std::ptrdiff_t x, std::ptrdiff_t n) { return (x % n + n) % n; }

  std::ptrdiff_t n_ = 0, nodes_ = 1, ranks_ = 1;
  std::map<int, std::pair<std::ptrdiff_t, std::ptrdiff_t>> at_;  // device -> (node, rank), or (0, position)
};

// The devices of `pairs` split into the sets that pairs link, each ascending, the sets in the order of
// their representative devices (as DisjointSets' unions pick them).
std::vector<std::vector<int>> linked_groups(const std::vector<std::pair<int, int>>& pairs) {
  std::vector<int> devices;  // ascending: device -> index keeps the representatives' order
  for (const auto& [a, b] : pairs) devices.insert(devices.end(), {a, b});
  std::ranges::sort(devices);
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  const auto index = [&](int device) {
    return static_cast<std::size_t>(std::ranges::lower_bound(devices, device) - devices.begin());
  };
  DisjointSets sets(devices.size());
  for (const auto& [a, b] : pairs) sets.unite(index(a), index(b));
  std::map<std::size_t, std::vector<int>> groups;  // representative -> devices
  for (std::size_t i = 0; i < devices.size(); ++i) groups[sets.find(i)].push_back(devices[i]);
  std::vector<std::vector<int>> result;
  for (auto& [r, group] : groups) result.push_back(std::move(group));
  return result;
}

// Point-to-point steps carry no slices, so each device of the new layout fetches its piece from the
// old one. Value parts must stay one decomposition: the devices of one new value group draw, for each
// old chunk, from a single old group, chosen by the new group's replica index (member i gives part i
// when the part counts agree; otherwise each takes the whole old group and combine rescales it) —
// mixing old groups would mix decompositions. A whole piece may come from any old group.
Expected<Holding> lower_p2p(const StepContext& ctx, const comm::PlannedStep& planned, const comm::Layout& before,
                            const Holding& holding) {
  // Old chunks: chunk coordinates -> replica groups, each its devices by value index.
  struct OldChunk {
    plan::SubTensor piece;  // the chunk's box (value part ignored)
    std::vector<std::vector<int>> groups;
  };
  std::map<comm::GridCoord, OldChunk> chunks;
  for (std::size_t p = 0; p < before.devices.size(); ++p) {
    const comm::GridCoord c = before.coord_of(p);
    OldChunk& chunk = chunks[comm::GridCoord(c.begin() + 2, c.end())];
    if (chunk.groups.empty()) {
      chunk.piece = ctx.piece(before, p);
      chunk.groups.assign(static_cast<std::size_t>(before.r), std::vector<int>(static_cast<std::size_t>(before.v)));
    }
    chunk.groups[static_cast<std::size_t>(c[comm::kAxisR])][static_cast<std::size_t>(c[comm::kAxisV])] = before.devices[p];
  }
  const comm::Layout& after = planned.after;
  const bool same_parts = after.v == before.v && after.v > 1;
  // What each new piece needs: (member holding the old chunk, the part of it, the receiver's position).
  struct Move {
    std::size_t to = 0;  // position in after.devices
    int member = 0;
    BufferId source;
    std::vector<plan::IndexRange> box;
  };
  std::vector<Move> moves;
  for (std::size_t p = 0; p < after.devices.size(); ++p) {
    const int device = after.devices[p];
    const comm::GridCoord c = after.coord_of(p);
    const plan::SubTensor target = ctx.piece(after, p);
    const std::size_t before_count = moves.size();
    for (const auto& [coord, chunk] : chunks) {
      const auto common = plan::box_intersection(chunk.piece, target);
      if (!common) continue;
      const std::vector<int>* group = &chunk.groups[static_cast<std::size_t>(c[comm::kAxisR] % before.r)];
      if (after.v == 1) {
        // A whole piece may come from any group: prefer the one this device is in, else the first one
        // holding a device of the new layout, so the exchange stays among the devices that read the
        // tensor (the interlaced head's input gradient, summed over every stage and read by the last:
        // its tp peers' parts rather than the first stage's, which would send them from inside its own
        // blocks).
        const auto in_new_layout = [&](int member) { return std::ranges::find(after.devices, member) != after.devices.end(); };
        const std::vector<int>* with_reader = nullptr;
        for (const std::vector<int>& g : chunk.groups)
          if (with_reader == nullptr && std::ranges::any_of(g, in_new_layout)) with_reader = &g;
        if (with_reader != nullptr) group = with_reader;
        for (const std::vector<int>& g : chunk.groups)
          if (std::ranges::find(g, device) != g.end()) group = &g;
      }
      const std::vector<int> members =
          same_parts ? std::vector<int>{(*group)[static_cast<std::size_t>(c[comm::kAxisV])]} : *group;
      for (int member : members) {
        LOOM_ASSIGN_OR_RETURN(BufferId source, held(holding, member));
        moves.push_back(Move{p, member, source, *common});
      }
    }
    if (moves.size() == before_count) return failf("no old chunk meets {}", target.to_string());
  }
  // Every send first, then each device's receives and combine (ProgramBuilder::send), in the order of
  // their offsets (SendOrder): every member's k-th transfer waits alike (an exchange stays one device class).
  const SendOrder offsets(after.devices, ctx.cluster);
  const auto distance = [&](const Move& m) { return offsets.distance(m.member, after.devices[m.to]); };
  std::vector<std::size_t> order(moves.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::ranges::stable_sort(order, [&](std::size_t a, std::size_t b) { return distance(moves[a]) < distance(moves[b]); });
  std::vector<std::vector<ProgramBuilder::PendingReceive>> pending(after.devices.size());
  std::vector<std::pair<int, int>> pairs;  // (sender, receiver) of each send
  std::vector<std::int64_t> tags;
  for (std::size_t i : order) {
    const Move& m = moves[i];
    pending[m.to].push_back(ctx.builder.send(ctx.builder.slice(m.source, m.box), after.devices[m.to], planned.step.rule));
    if (pending[m.to].back().tag < 0) continue;
    pairs.emplace_back(m.member, after.devices[m.to]);
    tags.push_back(pending[m.to].back().tag);
  }
  // Its groups, the devices linked by sends: where they are several (exchanges of value parts among each
  // group, which exchange_to_all_reduce makes all-reduces, priced with the step their sends share), the
  // sends keep them as their step, as a collective step's groups do.
  std::vector<std::vector<int>> groups = linked_groups(pairs);
  const std::int64_t step = ctx.builder.group_step(groups);
  for (std::int64_t tag : tags) ctx.builder.exec().collectives[static_cast<std::size_t>(tag)].step = step;
  ctx.builder.concurrent().lowered(ctx.search, ctx.index, comm::Primitive::p2p, std::move(groups), std::move(tags));
  Holding next;
  for (std::size_t p = 0; p < after.devices.size(); ++p) {
    // What the device holds itself first, then what it receives in ring order: every member's combine
    // reads its inputs from the same positions of its program (symmetry.h).
    std::vector<BufferId> parts;
    for (const ProgramBuilder::PendingReceive& r : pending[p])
      if (r.tag < 0) parts.push_back(r.buffer);
    for (const ProgramBuilder::PendingReceive& r : pending[p])
      if (r.tag >= 0) parts.push_back(ctx.builder.receive(r));
    next[after.devices[p]] = ctx.builder.combine(after.devices[p], std::move(parts), ctx.piece(after, p));
  }
  return next;
}

Expected<Holding> lower_step(const StepContext& ctx, const comm::PlannedStep& planned, const comm::Layout& before,
                             const Holding& holding) {
  const comm::Layout& after = planned.after;
  Holding next;
  switch (planned.step.primitive) {
    case comm::Primitive::all_reduce:
    case comm::Primitive::all_gather:
    case comm::Primitive::reduce_scatter:
    case comm::Primitive::all_to_all:
      return lower_collective(ctx, planned, holding);
    case comm::Primitive::local_chunk:
    case comm::Primitive::local_value_split:
      for (std::size_t p = 0; p < after.devices.size(); ++p) {
        const int device = after.devices[p];
        LOOM_ASSIGN_OR_RETURN(BufferId source, held(holding, device));
        const plan::SubTensor target = ctx.piece(after, p);
        next[device] = planned.step.primitive == comm::Primitive::local_chunk ? ctx.builder.slice(source, target.box)
                                                                               : ctx.builder.scale(source, target.value);
      }
      return next;
    case comm::Primitive::p2p:
      return lower_p2p(ctx, planned, before, holding);
  }
  return fail("unknown primitive");
}

bool has_p2p(const comm::TransitionPlan& plan) {
  return std::ranges::any_of(plan.steps, [](const comm::PlannedStep& s) { return s.step.primitive == comm::Primitive::p2p; });
}

// The search's plan; where it ran out of budget and finishes by sends, a plan of collectives alone when
// one is no slower. A truncated search finishes by whatever p2p step its cheapest expanded state offers:
// for llama3-8b's norm gradients over 8 nodes (V(64) -> node-major D(64)) a reduce-scatter within pairs
// of nodes, then sends whose pattern differs per node (node 0 to nodes 1-3, node 1 to nodes 4-7), so no
// node's programs stand for another's in a folded step (fold_classes.h). Without the p2p edge a state
// costs its collective rules alone (comm::SearchOptions::finish_by_p2p), so the search reaches the
// hierarchical plan (all-reduce within each node, then among the nodes' peers: the same on every node,
// 52.1 us against 55.1 us) for about the cost of the first search.
Expected<comm::TransitionPlan> route(const SearchContext& search, const comm::TransitionRequest& request) {
  LOOM_ASSIGN_OR_RETURN(comm::TransitionPlan found, search.cache.find(request, search.cluster, search.cost, search.options));
  if (!found.stopped_early || !has_p2p(found)) return found;
  const comm::SearchOptions collectives{.max_states = kCollectiveStatesPerState * search.options.max_states,
                                        .finish_by_p2p = false};
  LOOM_ASSIGN_OR_RETURN(comm::TransitionPlan alone, search.cache.find(request, search.cluster, search.cost, collectives));
  if (!has_p2p(alone) && alone.time <= found.time) return alone;
  return found;
}

}  // namespace

Expected<std::optional<std::vector<BufferId>>> layout_transition(ProgramBuilder& builder, const SearchContext& search,
                                                                 std::span<const BufferId> producers,
                                                                 std::span<const PlacedPiece> needs) {
  // The layouts are of the frame, the value part every need holds: the producers' parts of it.
  const plan::ValuePart frame = needs.front().piece.value;
  std::vector<PlacedPiece> produced, wanted;
  for (BufferId b : producers) {
    PlacedPiece p{builder.device(b), builder.piece(b)};
    const std::optional<plan::ValuePart> part = within(frame, p.piece.value);
    if (!part) return std::nullopt;
    p.piece.value = *part;
    produced.push_back(std::move(p));
  }
  for (const PlacedPiece& need : needs) {
    if (need.piece.value != frame) return std::nullopt;
    wanted.push_back({need.device, need.piece});
    wanted.back().piece.value = plan::ValuePart::whole();
  }
  std::vector<PlacedPiece> all = produced;
  all.insert(all.end(), wanted.begin(), wanted.end());
  const auto region = bounding_box(all);
  if (!region) return std::nullopt;
  const auto from = layout_of(produced, *region);
  const auto to = layout_of(wanted, *region);
  if (!from || !to || to->v != 1) return std::nullopt;

  const ir::TensorId tensor = needs.front().piece.tensor;
  const comm::TensorSpec spec{region_shape(*region), builder.exec().plan->graph->tensor(tensor).dtype};
  auto memo_key = std::make_tuple(spec.shape.dims, spec.dtype, *from, *to);
  auto known = search.memo.find(memo_key);
  if (known == search.memo.end()) {
    LOOM_ASSIGN_OR_RETURN(comm::TransitionPlan found, route(search, {spec, *from, *to}));
    known = search.memo.emplace(std::move(memo_key), std::move(found)).first;
  }
  const comm::TransitionPlan& plan = known->second;
  Holding holding;
  for (BufferId b : producers) holding[builder.device(b)] = b;
  std::vector<int> devices = from->devices;
  devices.insert(devices.end(), to->devices.begin(), to->devices.end());
  StepContext ctx{builder, search.cluster, tensor, *region, frame, builder.concurrent().begin_search(std::move(devices))};
  comm::Layout before = comm::canonical(*from);
  for (const comm::PlannedStep& planned : plan.steps) {
    Expected<Holding> next = lower_step(ctx, planned, before, holding);
    ++ctx.index;
    if (!next)
      return std::unexpected(with_context(next.error(), fmt::format("lowering '{}' of {} -> {}", planned.step.rule,
                                                                    comm::to_string(*from), comm::to_string(*to))));
    holding = std::move(*next);
    before = planned.after;
  }
  builder.stats().transitions_searched++;
  std::vector<BufferId> result;
  for (const PlacedPiece& need : needs) {
    const auto it = holding.find(need.device);
    if (it == holding.end() || builder.piece(it->second).box != need.piece.box)
      return failf("the layout search left device {} without {} ({} -> {})", need.device, need.piece.to_string(),
                   comm::to_string(*from), comm::to_string(*to));
    result.push_back(it->second);
  }
  return result;
}

}  // namespace loom::exec::detail
