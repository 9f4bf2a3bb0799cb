#include "loom/exec/materialize.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "background_frees.h"
#include "fetch.h"
#include "loom/exec/autograd_pairs.h"
#include "free_buffers.h"
#include "layout_transition.h"
#include "need_groups.h"
#include "recompute_buffers.h"
#include "local_sums.h"
#include "move_pieces.h"
#include "resident_tensors.h"
#include "loom/cluster/presets.h"
#include "loom/plan/recompute.h"
#include "loom/plan/validate.h"

namespace loom::exec {
namespace {

using detail::ConsumerNeeds;
using detail::NeedGroup;
using detail::NeedKey;
using detail::NeedMap;
using detail::NeedView;
using detail::ProgramBuilder;
using plan::normalized;
using plan::SubOp;
using plan::SubOpId;
using plan::SubTensor;

class Materializer {
 public:
  Materializer(const plan::Plan& plan, int num_devices, const MaterializeOptions& options,
               const detail::SearchContext& search)
      : plan_(plan), options_(options), search_(search), builder_(plan, num_devices),
        residents_(plan, builder_, search, written_, options.use_layout_search) {
    const ir::Graph& graph = *plan.graph;
    producers_.resize(graph.tensors.size());
    written_.resize(graph.tensors.size());
    outputs_.resize(plan.sub_ops.size());
    for (const SubOp& s : plan.sub_ops)
      if (s.live)
        for (std::size_t k = 0; k < s.outputs.size(); ++k) {
          producers_[s.outputs[k].tensor.index()].emplace_back(s.id, k);
          if (!s.outputs[k].value.is_whole()) {
            produced_on_.try_emplace(NeedKey{s.device, normalized(s.outputs[k])}, s.id, k);
            parts_on_[{s.device, s.outputs[k].tensor.value}].emplace_back(s.id, k);
          }
        }
    if (options.recompute_collectives)
      for (const ir::Op& op : graph.ops)
        if (op.pass == ir::Pass::forward)
          for (ir::TensorId in : op.inputs) first_reader_.try_emplace(in.value, op.id.value);
    readers_.resize(graph.tensors.size());
    for (const ir::Op& op : graph.ops)
      for (ir::TensorId in : op.inputs)
        if (auto& r = readers_[in.index()]; r.empty() || r.back() != op.id) r.push_back(op.id);
  }

  Expected<void> emit(const SubOp& s) {
    if (options_.recompute_collectives) LOOM_RETURN_IF_ERROR(sum_unread_again(s));
    LOOM_RETURN_IF_ERROR(move_groups_first(s));
    Compute compute{s.id, {}, {}};
    LOOM_ASSIGN_OR_RETURN(compute.inputs,
                          detail::input_buffers(plan_, s, [&](const SubTensor& in) { return need(s, in); },
                                                fmt::format("sub-op '{}'", s.name)));
    for (const SubTensor& out : s.outputs) {
      const BufferId b = builder_.new_buffer(s.device, out);
      compute.outputs.push_back(b);
      outputs_[s.id.index()].push_back(b);
      written_[out.tensor.index()].push_back(b);
      // Whole pieces are the data itself and may be read in place; a value part holds one producer's
      // partial sum, while a consumer of a value part reads a fraction of the whole (exec_plan.h).
      if (out.value.is_whole() && !available_.contains(NeedView{s.device, &out}))
        available_.emplace(NeedKey{s.device, normalized(out)}, b);
    }
    builder_.compute(s.device, std::move(compute));
    LOOM_RETURN_IF_ERROR(residents_.produced(s));  // resident gradients reduced, steps closed (plan/residence.h)
    for (std::size_t k = 0; k < s.outputs.size(); ++k)
      if (!s.outputs[k].value.is_whole()) completed_.emplace_back(s.id, k);
    return {};
  }

  // The partial sums of an activation (or of its gradient) summed as soon as the last of a group's
  // producers has run, where every device that reads the sum wrote a part of it: the collective then sits
  // in each member's program right after the block that wrote the parts, not where the global order
  // first reaches a reader. Waiting for the reader put it after the blocks other members ran meanwhile:
  // the interlaced head's input gradient, written by every device of a replica and read by the last stage
  // only after it recomputes its forward, was issued by the other stages inside their next backward, and
  // the last stage waited there (nnScaler Fig. 8, t5-21b on 16 GPUs: 0.31 s a step). Readers on devices
  // that wrote no part (a pipeline's next stage) still take their sum where they read it, so that no
  // receive blocks a device before it needs the data; weight gradients (the optimizer's, summed at the
  // step or as residence says) and persistent tensors are left as they were. Called at the end of each
  // round of the completed order (plan/validate.h), so that devices related by a symmetry of the plan
  // issue the sum at the same place in their programs.
  Expected<void> sum_completed() {
    for (const auto& [id, k] : completed_) LOOM_RETURN_IF_ERROR(sum_when_complete(plan_.sub_op(id), k));
    completed_.clear();
    return {};
  }

  Materialized finish() && {
    builder_.share_concurrent_steps();
    Materialized result{std::move(builder_.exec()), std::move(builder_.stats())};
    if (options_.free_buffers) detail::free_after_last_use(result.exec);
    result.stats.autograd_pairs = pair_autograd_collectives(result.exec);
    return result;
  }

 private:
  // The groups a sub-op's inputs are moved in (need's try_group), moved before any of its inputs is
  // read, so that every member of a group issues the group's collectives at the same place among its
  // own inputs' slices: moved where the first member reads its inputs in order, the first member sliced
  // its resident weight before ZeRO-1's gradient reduce-scatter and every other member after it, which
  // made the first device of a ZeRO slice a program of its own and kept a folded step's nodes apart
  // (fold_classes.h: llama3-8b dp 64 over 8 nodes, 16 classes).
  Expected<void> move_groups_first(const SubOp& s) {
    if (!options_.use_layout_search) return {};
    if (s.mirror.valid() && plan::is_recomputed(plan_, s.mirror) && plan_.op_of(s.id).pass == ir::Pass::backward)
      return {};  // its inputs may be summed again instead (need)
    const plan::OpLayout& layout = plan_.layouts[s.op.index()];
    for (std::size_t i = 0; i < s.inputs.size(); ++i) {
      const SubTensor& piece = s.inputs[i];
      if (layout.shape_only(i) || !piece.value.is_whole() || recomputed_.serves(s, piece) ||
          residents_.holds(piece.tensor) || producers_[piece.tensor.index()].empty())
        continue;
      const NeedView view{s.device, &piece};
      if (!available_.contains(view)) LOOM_RETURN_IF_ERROR(try_group(s, view));
    }
    return {};
  }

  Expected<BufferId> need(const SubOp& consumer, const SubTensor& piece) {
    if (recomputed_.serves(consumer, piece))
      return recomputed_.need(consumer, piece, [this](const SubOp& c, const SubTensor& p) { return checkpoint(c, p); });
    // The backward of a recomputed forward reads what recomputation summed again, not the forward's sum,
    // which then dies after its forward readers.
    if (consumer.mirror.valid() && plan::is_recomputed(plan_, consumer.mirror) &&
        plan_.op_of(consumer.id).pass == ir::Pass::backward) {
      LOOM_ASSIGN_OR_RETURN(std::optional<BufferId> summed, sum_again(consumer, piece));
      if (summed) return *summed;
    }
    if (residents_.holds(piece.tensor)) return residents_.need(consumer, piece);
    if (!piece.value.is_whole() && !producers_[piece.tensor.index()].empty()) return need_value_part(consumer, piece);
    const NeedView view{consumer.device, &piece};
    if (auto it = available_.find(view); it != available_.end()) return it->second;
    const SubTensor target = normalized(piece);
    const std::size_t tensor = piece.tensor.index();
    BufferId b;
    if (producers_[tensor].empty()) {
      b = builder_.load(consumer.device, target);
    } else {
      if (piece.value.is_whole() && options_.use_layout_search) LOOM_RETURN_IF_ERROR(try_group(consumer, view));
      if (auto it = available_.find(view); it != available_.end()) return it->second;
      b = detail::fetch(builder_, consumer.device, target, written_[tensor], "fallback");
    }
    available_.emplace(NeedKey{consumer.device, target}, b);
    return b;
  }

  // What a recomputed sub-op reads from outside its recomputation. A recomputation gathers model state
  // again (ZeRO-3) rather than keep the forward's copy; it sums again the partial sums that recomputed
  // producers write (below); everything else is the forward's checkpoint.
  Expected<BufferId> checkpoint(const SubOp& consumer, const SubTensor& piece) {
    if (residents_.holds(piece.tensor)) return residents_.need(consumer, piece, /*rerun=*/true);
    LOOM_ASSIGN_OR_RETURN(std::optional<BufferId> summed, sum_again(consumer, piece));
    if (summed) return *summed;
    return need(consumer, piece);
  }

  // Megatron's full recompute: a whole piece the forward summed from partial sums of recomputed producers
  // (a row-parallel linear's all-reduce) is summed again from their recomputations, the producers rerun
  // on every member of the consumer group and the same layout search run for the whole group at once
  // (so the members issue the collective in one global order). Only with recompute_collectives, unless
  // the sum is local (a coshard region's parts on one device: no transfer to repeat). nullopt where a
  // producer is not recomputed or the forward did not move the group at once (the checkpoint then serves).
  Expected<std::optional<BufferId>> sum_again(const SubOp& consumer, const SubTensor& piece) {
    const NeedView view{consumer.device, &piece};
    if (auto it = summed_again_.find(view); it != summed_again_.end()) return it->second;
    if (!piece.value.is_whole() || producers_[piece.tensor.index()].empty()) return std::nullopt;
    ConsumerNeeds& needs = consumer_needs(consumer.op, piece.tensor);
    const auto at = needs.group_of.find(view);
    if (at == needs.group_of.end()) return std::nullopt;
    const NeedGroup& group = needs.groups[at->second];
    const auto elsewhere = [&](int device) { return device != consumer.device; };
    if (!options_.recompute_collectives &&
        (std::ranges::any_of(group.needs, elsewhere, &detail::PlacedPiece::device) ||
         std::ranges::any_of(group.producers, [&](const detail::OutputRef& p) { return elsewhere(plan_.sub_op(p.first).device); })))
      return std::nullopt;
    LOOM_ASSIGN_OR_RETURN(const bool summed, sum_group_again(group));
    if (!summed) return std::nullopt;
    return summed_again_.at(NeedKey{consumer.device, normalized(piece)});
  }

  // Megatron's recompute reruns a layer's whole forward, also the all-reduces whose sums no backward op
  // reads (a row-parallel linear's at the layer's end): before a backward part whose forward part was
  // recomputed and wrote partial sums, those sums are summed again for their first forward reader.
  Expected<void> sum_unread_again(const SubOp& backward) {
    if (!backward.mirror.valid() || !plan::is_recomputed(plan_, backward.mirror)) return {};
    const SubOp& forward = plan_.sub_op(backward.mirror);
    for (std::size_t k = 0; k < forward.outputs.size(); ++k) {
      const SubTensor& out = forward.outputs[k];
      const auto reader = first_reader_.find(out.tensor.value);
      if (out.value.is_whole() || reader == first_reader_.end()) continue;
      ConsumerNeeds& needs = consumer_needs(ir::OpId{reader->second}, out.tensor);
      for (const NeedGroup& group : needs.groups)
        if (std::ranges::find(group.producers, detail::OutputRef{forward.id, k}) != group.producers.end() &&
            !summed_again_.contains(NeedKey{group.needs.front().device, group.needs.front().piece})) {
          LOOM_RETURN_IF_ERROR(sum_group_again(group));
        }
    }
    return {};
  }

  // Reruns the group's producers (false where one is not plainly recomputed, e.g. a coshard part without
  // full recompute, or writes whole values) and moves their partial sums to the group's needs at once, as
  // the forward did (false where that fails).
  Expected<bool> sum_group_again(const NeedGroup& group) {
    for (const auto& [sub_op, k] : group.producers)
      if (plan_.sub_op(sub_op).outputs[k].value.is_whole() || !plan::is_plain_recompute(plan_, sub_op)) return false;
    const auto checkpoint_of = [this](const SubOp& c, const SubTensor& p) { return checkpoint(c, p); };
    std::vector<BufferId> sources;
    for (const auto& [sub_op, k] : group.producers) {
      LOOM_ASSIGN_OR_RETURN(const std::vector<BufferId>* outputs, recomputed_.rerun(sub_op, checkpoint_of));
      sources.push_back((*outputs)[k]);
    }
    LOOM_ASSIGN_OR_RETURN(std::optional<std::vector<BufferId>> moved,
                          detail::move_group(builder_, search_, sources, group.needs));
    if (!moved) return false;
    for (std::size_t i = 0; i < group.needs.size(); ++i)
      summed_again_.try_emplace(NeedKey{group.needs[i].device, group.needs[i].piece}, (*moved)[i]);
    return true;
  }

  // A value part of a produced tensor: any decomposition will do, as long as one consumer op reads one
  // decomposition (exec_plan.h). When every value part the op reads of the tensor lies ready on its own
  // device (e.g. a replicated op's backward reading the partial sums of a split one, or a tied weight's
  // gradient accumulation split over tp reading its box of a partial sum that a tp-replicated head
  // wrote), it reads those in place or sliced, moving nothing; otherwise the parts of each box read come
  // as the producers' own parts or sums (local_sums.h: summed_in_place), else each is fetched as the whole
  // times its fraction. In place is decided once per (op, tensor), the rest once per box read, so the
  // parts summing to one box never mix two decompositions.
  Expected<BufferId> need_value_part(const SubOp& consumer, const SubTensor& piece) {
    auto [cache, fresh] = part_cache_.try_emplace({consumer.op.value, piece.tensor.value});
    if (fresh) cache->second.in_place = all_parts_in_place(consumer.op, piece.tensor);
    // Else each device may add up the partial sums it holds: decided per box read, when its first part is
    // materialized (a later micro-batch's producers are not written yet).
    const SubTensor read = normalized(piece);
    if (!cache->second.in_place && cache->second.boxes_tried.insert(read.box).second)
      cache->second.buffers.merge(
          detail::summed_in_place(builder_, plan_, consumer.op, piece.tensor, read.box, written_[piece.tensor.index()],
                                  [this](std::span<const BufferId> parts) { return residents_.current(parts); }));
    const NeedView view{consumer.device, &piece};
    if (auto it = cache->second.buffers.find(view); it != cache->second.buffers.end()) return it->second;
    BufferId b;
    if (cache->second.in_place) {
      const auto [sub_op, k] = *produced_here(consumer.device, piece);
      b = builder_.slice(outputs_[sub_op.index()].at(k), normalized(piece).box);
    } else {
      b = detail::fetch(builder_, consumer.device, normalized(piece), written_[piece.tensor.index()], "fallback");
    }
    cache->second.buffers.emplace(NeedKey{consumer.device, normalized(piece)}, b);
    return b;
  }

  bool all_parts_in_place(ir::OpId op, ir::TensorId tensor) const {
    const plan::OpLayout& layout = plan_.layouts[op.index()];
    for (SubOpId part : plan_.parts[op.index()]) {
      const SubOp& s = plan_.sub_op(part);
      for (std::size_t i = 0; i < s.inputs.size(); ++i)
        if (s.inputs[i].tensor == tensor && !layout.shape_only(i) && !produced_here(s.device, s.inputs[i]))
          return false;
    }
    return true;
  }

  // A producer output on `device` of `piece`'s value part whose box contains `piece`'s; nullopt when none.
  std::optional<detail::OutputRef> produced_here(int device, const SubTensor& piece) const {
    if (auto it = produced_on_.find(NeedView{device, &piece}); it != produced_on_.end()) return it->second;
    const auto parts = parts_on_.find({device, piece.tensor.value});
    if (parts == parts_on_.end()) return std::nullopt;
    for (const auto& [sub_op, k] : parts->second) {
      const SubTensor& out = plan_.sub_op(sub_op).outputs[k];
      if (out.value == piece.value && plan::contains(out, piece)) return detail::OutputRef{sub_op, k};
    }
    return std::nullopt;
  }

  // Moves the whole group holding `key` with the layout search, once, if its producers have all run.
  Expected<void> try_group(const SubOp& consumer, const NeedView& key) {
    ConsumerNeeds& needs = consumer_needs(consumer.op, key.piece->tensor);
    const auto at = needs.group_of.find(key);
    if (at == needs.group_of.end()) return {};
    return move_group_once(needs.groups[at->second], needs.concurrent);
  }

  // sum_completed's step for output k of `s`: each reader op's group of it whose producers have all run.
  Expected<void> sum_when_complete(const SubOp& s, std::size_t k) {
    if (!options_.use_layout_search) return {};
    const ir::Graph& graph = *plan_.graph;
    const ir::TensorId tensor = s.outputs[k].tensor;
    if (residents_.holds(tensor) || plan::persists(graph, tensor)) return {};
    if (ir::is_parameter_gradient(graph, tensor)) return {};
    for (ir::OpId reader : readers_[tensor.index()]) {
      ConsumerNeeds& needs = consumer_needs(reader, tensor);
      const auto at = needs.group_of_producer.find(detail::OutputRef{s.id, k});
      if (at == needs.group_of_producer.end()) continue;
      NeedGroup& group = needs.groups[at->second];
      if (group.tried || !read_where_written(group)) continue;
      // Another reader's group may have summed the same pieces already (a residual and a dropout reading
      // one row-parallel output): they are read from there, as need() would.
      const auto ready = [&](const detail::PlacedPiece& n) { return available_.contains(NeedView{n.device, &n.piece}); };
      if (std::ranges::all_of(group.needs, ready)) continue;
      LOOM_RETURN_IF_ERROR(move_group_once(group, needs.concurrent));
    }
    return {};
  }

  // Whether every producer of the group has run and every device needing its pieces runs one of them.
  bool read_where_written(const NeedGroup& group) const {
    std::set<int> writers;
    for (const auto& [sub_op, k] : group.producers) {
      if (outputs_[sub_op.index()].empty()) return false;
      writers.insert(plan_.sub_op(sub_op).device);
    }
    return std::ranges::all_of(group.needs, [&](const detail::PlacedPiece& n) { return writers.contains(n.device); });
  }

  // Moves `group` with the layout search, once, if its producers have all run; its search joins the set
  // `concurrent` of searches that run at once (concurrent_steps.h; -1: none).
  Expected<void> move_group_once(NeedGroup& group, std::int64_t concurrent) {
    if (group.tried) return {};
    group.tried = true;
    const detail::ConcurrentSteps::Scope at_once(builder_.concurrent(), concurrent);
    std::vector<BufferId> sources;
    for (const auto& [sub_op, k] : group.producers) {
      if (outputs_[sub_op.index()].empty()) return {};  // not run yet: this group cannot move at once
      sources.push_back(outputs_[sub_op.index()][k]);
    }
    LOOM_ASSIGN_OR_RETURN(std::optional<std::vector<BufferId>> moved,
                          detail::move_group(builder_, search_, residents_.current(sources), group.needs));
    if (!moved) return {};
    for (std::size_t i = 0; i < group.needs.size(); ++i)
      available_.try_emplace(NeedKey{group.needs[i].device, group.needs[i].piece}, (*moved)[i]);
    return {};
  }

  // The needs of `op` for `tensor`, grouped. The groups of a weight gradient (the optimizer's, one per
  // piece's box: each tp piece reduced over the dp replicas) are moved at the same point of the step, so
  // their searches' steps are priced together (concurrent_steps.h); not an activation's, whose groups
  // (micro-batches, replicas) run at different points of a pipeline.
  ConsumerNeeds& consumer_needs(ir::OpId op, ir::TensorId tensor) {
    auto [it, fresh] = needs_.try_emplace({op.value, tensor.value});
    if (fresh) {
      it->second = detail::group_needs(plan_, op, tensor, producers_[tensor.index()]);
      if (ir::is_parameter_gradient(*plan_.graph, tensor)) it->second.concurrent = builder_.concurrent().new_set();
    }
    return it->second;
  }

  const plan::Plan& plan_;
  const MaterializeOptions& options_;
  const detail::SearchContext& search_;
  ProgramBuilder builder_;
  detail::RecomputedBuffers recomputed_{plan_, builder_};  // plan/recompute.h
  std::vector<std::vector<BufferId>> written_;  // by tensor: producer outputs so far
  detail::ResidentTensors residents_;
  std::vector<std::vector<detail::OutputRef>> producers_;               // by tensor
  std::vector<std::vector<BufferId>> outputs_;                           // by sub-op, once emitted
  NeedMap<BufferId> available_;
  NeedMap<BufferId> summed_again_;  // recompute_collectives: whole pieces summed again for recomputation
  std::unordered_map<std::uint32_t, std::uint32_t> first_reader_;  // recompute_collectives: tensor -> forward op
  std::vector<std::vector<ir::OpId>> readers_;                     // by tensor: the ops reading it
  std::vector<detail::OutputRef> completed_;  // value parts written this round, for sum_completed
  std::map<std::pair<std::uint32_t, std::uint32_t>, ConsumerNeeds> needs_;  // by (consumer op, tensor)
  // Value parts: where each is produced (device and label -> its first producer), and per (consumer op,
  // tensor) whether they are read in place and the buffers given out.
  NeedMap<std::pair<SubOpId, std::size_t>> produced_on_;
  std::map<std::pair<int, std::uint32_t>, std::vector<detail::OutputRef>> parts_on_;  // by (device, tensor)
  struct PartCache {
    bool in_place = false;
    NeedMap<BufferId> buffers;
    std::set<std::vector<plan::IndexRange>> boxes_tried;  // boxes read that summed_in_place was asked for
  };
  std::map<std::pair<std::uint32_t, std::uint32_t>, PartCache> part_cache_;
};

Expected<cluster::Cluster> cluster_for(const MaterializeOptions& options, int num_devices) {
  if (options.cluster) {
    if (options.cluster->device_count() < num_devices)
      return fail(fmt::format("the plan uses {} devices, but cluster '{}' has {}", num_devices, options.cluster->name,
                              options.cluster->device_count()),
                  "pick a cluster with enough GPUs (e.g. dgx-a100x<nodes>)");
    return *options.cluster;
  }
  const int nodes = (num_devices + 7) / 8;
  return cluster::make_cluster(nodes == 1 ? std::string("dgx-a100") : fmt::format("dgx-a100x{}", nodes));
}

}  // namespace

std::shared_ptr<const comm::CommCostModel> bandwidth_only_cost(cluster::Cluster cluster) {
  cluster.intra.latency = 0;
  cluster.inter.latency = 0;
  if (cluster.bridge) cluster.bridge->tier.latency = 0;
  return std::make_shared<comm::AlphaBetaCostModel>(std::move(cluster), comm::CommCostOptions{.launch_latency = 0});
}

Expected<Materialized> materialize(const plan::Plan& plan, int num_devices, const MaterializeOptions& options) {
  if (plan.graph == nullptr) return fail("the plan has no graph");
  LOOM_ASSIGN_OR_RETURN(plan::ExecutionOrder order, plan::complete_order(plan, num_devices));  // validates too
  LOOM_ASSIGN_OR_RETURN(cluster::Cluster cluster, cluster_for(options, num_devices));
  const std::shared_ptr<const comm::CommCostModel> cost =
      options.cost_model ? options.cost_model : std::make_shared<comm::AlphaBetaCostModel>(cluster);
  // The process's searched transitions: a search's slices and finalists move the same tensors over the
  // same mesh (llama3-8b's ZeRO-1 winner on 64 GPUs searched its ~12 transitions again, ~0.1 s each).
  static comm::SharedTransitionCache shared;
  comm::TransitionCache cache(options.share_transitions ? &shared : nullptr);
  std::map<std::tuple<std::vector<std::int64_t>, ir::DType, comm::Layout, comm::Layout>, comm::TransitionPlan> memo;
  const detail::SearchContext search{cluster, *cost, options.search, cache, memo};
  auto materializer = std::make_unique<Materializer>(plan, num_devices, options, search);
  std::size_t next = 0;
  for (std::size_t end : order.round_ends) {
    for (; next < end; ++next) LOOM_RETURN_IF_ERROR(materializer->emit(plan.sub_op(order.global[next])));
    LOOM_RETURN_IF_ERROR(materializer->sum_completed());
  }
  Materialized result = std::move(*materializer).finish();
  // Its maps take ~0.2 s to free at 64 devices; it refers to the plan and this call's search context, which
  // its destructor does not touch.
  detail::BackgroundFrees::instance().free(std::move(materializer));
  result.stats.distinct_searches = static_cast<std::int64_t>(cache.size());
  return result;
}

}  // namespace loom::exec
