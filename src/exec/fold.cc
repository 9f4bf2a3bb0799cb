#include "loom/exec/fold.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "fold_classes.h"
#include "fold_segments.h"
#include "loom/exec/instruction_buffers.h"
#include "loom/exec/device_classes.h"

namespace loom::exec {

int full_device(const FoldShape& shape, int slice_device, int replica) {
  const int stage = slice_device / shape.tp, rank = slice_device % shape.tp;
  return (stage * shape.dp + replica) * shape.tp + rank;
}

int slice_device_of(const FoldShape& shape, int device) {
  return device / (shape.dp * shape.tp) * shape.tp + device % shape.tp;
}

namespace {

Expected<void> check_shape(const ExecPlan& slice, const FoldShape& shape) {
  if (shape.dp < 1 || shape.tp < 1 || shape.pp < 1 || shape.chunks < 1 || shape.micro_batches < 1)
    return fail(fmt::format("fold degrees dp {} tp {} pp {} chunks {} micro-batches {}", shape.dp, shape.tp, shape.pp,
                            shape.chunks, shape.micro_batches),
                "every degree is at least 1");
  if (slice.num_devices != shape.tp * shape.pp || slice.programs.size() != static_cast<std::size_t>(slice.num_devices))
    return fail(fmt::format("the slice has {} devices, not tp {} x pp {}", slice.num_devices, shape.tp, shape.pp),
                "materialize one replica's slice over tp x pp devices");
  if (slice.plan == nullptr) return fail("the slice has no plan", "unfold a materialized ExecPlan");
  if (shape.sequences.size() != static_cast<std::size_t>(shape.pp))
    return fail(fmt::format("{} block sequences for {} pipeline devices", shape.sequences.size(), shape.pp));
  for (const auto& sequence : shape.sequences)
    if (sequence.size() != static_cast<std::size_t>(2 * shape.chunks * shape.micro_batches))
      return fail(fmt::format("a block sequence of {} blocks for {} chunks and {} micro-batches", sequence.size(),
                              shape.chunks, shape.micro_batches),
                  "give plan::schedule_blocks' template");
  return {};
}

// The slice devices that get programs: the class representatives, and whoever sends to a device that
// has one (a recv reads its sender's program).
std::vector<char> kept_devices(const ExecPlan& slice, const DeviceClasses& classes) {
  std::vector<char> kept(static_cast<std::size_t>(slice.num_devices), 0);
  std::vector<int> todo(classes.representatives);
  for (int d : todo) kept[static_cast<std::size_t>(d)] = 1;
  while (!todo.empty()) {
    const int d = todo.back();
    todo.pop_back();
    for (const Instruction& in : slice.programs[static_cast<std::size_t>(d)])
      if (const auto* r = std::get_if<Recv>(&in); r != nullptr && kept[static_cast<std::size_t>(r->peer)] == 0) {
        kept[static_cast<std::size_t>(r->peer)] = 1;
        todo.push_back(r->peer);
      }
  }
  return kept;
}

class Unfolder {
 public:
  Unfolder(const ExecPlan& slice, const FoldShape& shape, std::vector<std::vector<int>> segments)
      : slice_(slice), shape_(shape), seg_(std::move(segments)) {
    out_.plan = slice.plan;
    out_.num_devices = shape.dp * shape.tp * shape.pp;
    out_.programs.resize(static_cast<std::size_t>(out_.num_devices));
    if (shape.dp > 1) reducers_ = gradient_reducers(slice, seg_);
  }

  void device(int d) {
    d_ = d;
    full_ = full_device(shape_, d, 0);
    const auto& program = slice_.programs[static_cast<std::size_t>(d)];
    const auto& seg = seg_[static_cast<std::size_t>(d)];
    copies_.clear();
    carried_.clear();
    final_.clear();
    // Which buffers blocks write, and which of those the epilogue reads (accumulated over instances);
    // which gradients the optimizer steps read (reduced over dp).
    std::unordered_map<std::uint32_t, int> written_in;
    optimizer_read_.clear();
    for (std::size_t i = 0; i < program.size(); ++i) {
      if (const auto* c = std::get_if<Compute>(&program[i]); c != nullptr && seg[i] == kEpilogue &&
                                                             slice_.plan->op_of(c->sub_op).pass == ir::Pass::optimizer)
        for (BufferId b : c->inputs)
          if (b.valid() && gradient(b)) optimizer_read_.insert(b.index());
      for_each_written(program[i], [&](BufferId b) { written_in[b.index()] = seg[i]; });
      if (seg[i] == kEpilogue)
        for_each_read(program[i], [&](BufferId b) {
          if (const auto it = written_in.find(b.index()); it != written_in.end() && is_block(it->second))
            carried_.emplace(b.index(), Carried{});
        });
    }
    written_in_ = std::move(written_in);
    // Each carried buffer joins its running sum right after the last instruction of its block that
    // touches it (as the explicit plan accumulates each gradient as it comes), not at the block's end:
    // a block would otherwise hold every part of a micro-batch at once beside the sums.
    std::unordered_map<std::uint32_t, std::size_t> last_touch;
    for (std::size_t i = 0; i < program.size(); ++i) {
      if (!is_block(seg[i])) continue;
      const auto touch = [&](BufferId b) {
        if (const auto it = written_in_.find(b.index());
            it != written_in_.end() && it->second == seg[i] && carried_.contains(b.index()))
          last_touch[b.index()] = i;
      };
      for_each_written(program[i], touch);
      for_each_read(program[i], touch);
    }
    accumulate_after_.clear();
    for (const auto& [index, carried] : carried_)
      if (const auto it = last_touch.find(index); it != last_touch.end()) accumulate_after_[it->second].push_back(index);
    auto& target = out_.programs[static_cast<std::size_t>(full_)];
    for (std::size_t i = 0; i < program.size(); ++i)
      if (seg[i] == kPrologue) emit(target, program[i], -1, seg[i]);
    std::map<int, int> instances;  // by segment: instances emitted so far
    const int rank = d / shape_.tp;
    for (const plan::Block& block : shape_.sequences[static_cast<std::size_t>(rank)]) {
      const int segment = block_segment(block.stage / shape_.pp, block.part != plan::BlockPart::forward);
      const bool last = ++instances[segment] == shape_.micro_batches;
      for (std::size_t i = 0; i < program.size(); ++i) {
        if (seg[i] != segment) continue;
        emit(target, program[i], block.micro_batch, segment);
        if (const auto it = accumulate_after_.find(i); it != accumulate_after_.end())
          for (std::uint32_t index : it->second) accumulate(target, index, block.micro_batch, last);
      }
    }
    for (std::size_t i = 0; i < program.size(); ++i)
      if (seg[i] == kEpilogue) emit(target, program[i], -1, seg[i]);
    for (BufferId b : deferred_frees_) target.push_back(Free{b});
    deferred_frees_.clear();
  }

  ExecPlan take(const DeviceClasses& classes) && {
    const int devices = out_.num_devices;
    out_.class_of.assign(static_cast<std::size_t>(devices), 0);
    for (int s = 0; s < slice_.num_devices; ++s)
      for (int r = 0; r < shape_.dp; ++r)
        out_.class_of[static_cast<std::size_t>(full_device(shape_, s, r))] = classes.class_of[static_cast<std::size_t>(s)];
    for (int rep : classes.representatives) out_.representatives.push_back(full_device(shape_, rep, 0));
    return std::move(out_);
  }

 private:
  struct Carried {
    BufferId sum;   // the running sum over the instances so far
  };

  bool gradient(BufferId b) const {
    return slice_.plan->graph->tensor(slice_.buffer(b).piece.tensor).role == ir::TensorRole::gradient;
  }

  bool block_written(BufferId b) const {
    const auto it = written_in_.find(b.index());
    return it != written_in_.end() && is_block(it->second);
  }

  // The copy of slice buffer b for micro-batch k (-1: the one copy of a buffer written once).
  BufferId copy(BufferId b, int k) {
    if (!b.valid()) return b;
    if (k < 0 || !block_written(b)) k = -1;
    const std::uint64_t key = (std::uint64_t{b.index()} << 20) | static_cast<std::uint64_t>(k + 1);
    if (const auto it = copies_.find(key); it != copies_.end()) return it->second;
    const Buffer& old = slice_.buffer(b);
    const BufferId fresh = out_.add_buffer(full_, old.piece, old.bytes);
    copies_.emplace(key, fresh);
    return fresh;
  }

  // What an epilogue instruction reads for b: the reduced sum of a carried buffer, else its copy.
  BufferId read(BufferId b, int k, int segment) {
    if (segment == kEpilogue)
      if (const auto it = final_.find(b.index()); it != final_.end()) return it->second;
    return copy(b, k);
  }

  std::int64_t tag(std::int64_t old, int k) {
    const auto key = std::pair{old, k};
    if (const auto it = tags_.find(key); it != tags_.end()) return it->second;
    CollectiveInfo info = old >= 0 && static_cast<std::size_t>(old) < slice_.collectives.size()
                              ? slice_.collectives[static_cast<std::size_t>(old)]
                              : CollectiveInfo{};
    info.paired = -1;
    info.step = step(info.step);
    const std::int64_t fresh = out_.add_tag(std::move(info));
    tags_.emplace(key, fresh);
    return fresh;
  }

  // The step's slice groups on the full devices; one step for all its instances (they differ in tags only:
  // add_group_step gives an equal list's step).
  std::int64_t step(std::int64_t slice_step) {
    if (slice_step < 0 || static_cast<std::size_t>(slice_step) >= slice_.group_steps.size()) return -1;
    std::vector<std::vector<int>> groups;
    for (const std::vector<int>& group : slice_.group_steps[static_cast<std::size_t>(slice_step)])
      groups.push_back(full_group(group));
    return out_.add_group_step(std::move(groups));
  }

  std::vector<int> full_group(const std::vector<int>& group) const {
    std::vector<int> out;
    out.reserve(group.size());
    for (int g : group) out.push_back(full_device(shape_, g, 0));
    return out;
  }

  void emit(std::vector<Instruction>& target, const Instruction& in, int k, int segment) {
    const int t = segment == kEpilogue || segment == kPrologue ? -1 : k;
    std::visit(
        [&](const auto& i) {
          using T = std::decay_t<decltype(i)>;
          if constexpr (std::is_same_v<T, Compute>) {
            if (segment == kEpilogue)
              for (BufferId b : i.inputs)
                if (b.valid() && optimizer_read_.count(b.index()) != 0 && final_.count(b.index()) == 0)
                  final_[b.index()] = reduce_over_replicas(target, copy(b, -1), slice_.buffer(b));
            Compute c{i.sub_op, {}, {}};
            for (BufferId b : i.inputs) c.inputs.push_back(b.valid() ? read(b, k, segment) : b);
            for (BufferId b : i.outputs) c.outputs.push_back(copy(b, k));
            target.push_back(std::move(c));
          } else if constexpr (std::is_same_v<T, Load>) {
            target.push_back(Load{copy(i.output, -1)});
          } else if constexpr (std::is_same_v<T, Collective>) {
            target.push_back(Collective{i.kind, full_group(i.group), tag(i.tag, t), read(i.input, k, segment), copy(i.output, k)});
          } else if constexpr (std::is_same_v<T, CollectiveStart>) {
            CollectiveStart c{i.kind, full_group(i.group), tag(i.tag, t), {}, {}};
            for (BufferId b : i.inputs) c.inputs.push_back(read(b, k, segment));
            for (BufferId b : i.outputs) c.outputs.push_back(copy(b, k));
            target.push_back(std::move(c));
          } else if constexpr (std::is_same_v<T, CollectiveWait>) {
            target.push_back(CollectiveWait{tag(i.tag, t)});
          } else if constexpr (std::is_same_v<T, Send>) {
            target.push_back(Send{full_device(shape_, i.peer, 0), tag(i.tag, t), read(i.buffer, k, segment)});
          } else if constexpr (std::is_same_v<T, Recv>) {
            target.push_back(Recv{full_device(shape_, i.peer, 0), tag(i.tag, t), copy(i.buffer, k)});
          } else if constexpr (std::is_same_v<T, Local>) {
            Local l{i.kind, {}, copy(i.output, k)};
            for (BufferId b : i.inputs) l.inputs.push_back(read(b, k, segment));
            target.push_back(std::move(l));
          } else {
            if (is_block(segment) && !block_written(i.buffer)) {
              deferred_frees_.insert(copy(i.buffer, -1));  // data written once is freed once, at the end
            } else if (!is_block(segment) || carried_.count(i.buffer.index()) == 0) {
              target.push_back(Free{read(i.buffer, k, segment)});
            }
          }
        },
        in);
  }

  // In instance k of its block: carried buffer `index` joins the running sum; after the last instance, a
  // gradient the optimizer reads is all-reduced over the dp replicas.
  void accumulate(std::vector<Instruction>& target, std::uint32_t index, int k, bool last) {
    Carried& carried = carried_.at(index);
    const BufferId slice_buffer(index);
    const BufferId part = copy(slice_buffer, k);
    if (!carried.sum.valid()) {
      carried.sum = part;
    } else {
      const Buffer& old = slice_.buffer(slice_buffer);
      const BufferId sum = out_.add_buffer(full_, old.piece, old.bytes);
      target.push_back(Local{LocalKind::combine, {carried.sum, part}, sum});
      target.push_back(Free{carried.sum});
      target.push_back(Free{part});
      carried.sum = sum;
    }
    if (!last) return;
    final_[index] = optimizer_read_.count(index) != 0
                        ? reduce_over_replicas(target, carried.sum, slice_.buffer(slice_buffer))
                        : carried.sum;
  }

  // A gradient the optimizer reads, summed over the dp replicas (each holds a value part of the step's
  // gradient): an all-reduce over the images of this device, freeing the part. With dp 1, the part.
  BufferId reduce_over_replicas(std::vector<Instruction>& target, BufferId part, const Buffer& old) {
    if (shape_.dp == 1) return part;
    const std::int64_t fresh = out_.add_tag(CollectiveInfo{.tensor = old.piece.tensor,
                                                           .rule = "V->R all-reduce over data parallel",
                                                           .paired = -1,
                                                           .step = replica_step(old.piece.tensor)});
    const BufferId reduced = out_.add_buffer(full_, old.piece, old.bytes);
    target.push_back(Collective{comm::Primitive::all_reduce, replicas(d_), fresh, part, reduced});
    target.push_back(Free{part});
    return reduced;
  }

  // Slice device d's images over the dp replicas: the group of its gradients' reduction.
  std::vector<int> replicas(int d) const {
    std::vector<int> group;
    for (int r = 0; r < shape_.dp; ++r) group.push_back(full_device(shape_, d, r));
    return group;
  }

  // The reductions over replicas of one gradient's pieces run at once, one group per slice device that
  // holds a piece: one step, as the explicit plan joins the steps of its per-piece searches
  // (concurrent_steps.h) or its one search of a replicated weight's gradient has a group per tp rank.
  std::int64_t replica_step(ir::TensorId tensor) {
    const auto it = reducers_.find(tensor);
    if (it == reducers_.end()) return -1;
    std::vector<std::vector<int>> groups;
    for (int d : it->second) groups.push_back(replicas(d));
    return out_.add_group_step(std::move(groups));  // -1 for one reducer; every call for a tensor one step
  }

  // By gradient tensor: the slice devices whose optimizer steps read a piece of it (each reduces its
  // piece over the replicas).
  static std::map<ir::TensorId, std::vector<int>> gradient_reducers(const ExecPlan& slice,
                                                                     const std::vector<std::vector<int>>& seg) {
    std::map<ir::TensorId, std::vector<int>> reducers;
    for (int d = 0; d < slice.num_devices; ++d) {
      const auto& program = slice.programs[static_cast<std::size_t>(d)];
      std::set<ir::TensorId> read;
      for (std::size_t i = 0; i < program.size(); ++i)
        if (const auto* c = std::get_if<Compute>(&program[i]);
            c != nullptr && seg[static_cast<std::size_t>(d)][i] == kEpilogue &&
            slice.plan->op_of(c->sub_op).pass == ir::Pass::optimizer)
          for (BufferId b : c->inputs)
            if (b.valid() && slice.plan->graph->tensor(slice.buffer(b).piece.tensor).role == ir::TensorRole::gradient)
              read.insert(slice.buffer(b).piece.tensor);
      for (ir::TensorId t : read) reducers[t].push_back(d);
    }
    return reducers;
  }

  const ExecPlan& slice_;
  const FoldShape& shape_;
  std::vector<std::vector<int>> seg_;
  ExecPlan out_;
  std::map<std::pair<std::int64_t, int>, std::int64_t> tags_;  // (slice tag, instance or -1) -> tag
  std::map<ir::TensorId, std::vector<int>> reducers_;          // gradient_reducers, with dp > 1
  // Per device being unfolded:
  int d_ = 0, full_ = 0;
  std::unordered_map<std::uint64_t, BufferId> copies_;
  std::unordered_map<std::uint32_t, int> written_in_;  // slice buffer -> the segment writing it
  std::map<std::uint32_t, Carried> carried_;            // ordered: deterministic emission
  std::unordered_map<std::size_t, std::vector<std::uint32_t>> accumulate_after_;  // instruction -> carried buffers
  std::unordered_map<std::uint32_t, BufferId> final_;   // carried slice buffer -> what the epilogue reads
  std::set<BufferId> deferred_frees_;
  std::unordered_set<std::uint32_t> optimizer_read_;    // slice gradients the optimizer steps read
};

}  // namespace

Expected<FoldedStep> unfold_step(const ExecPlan& slice, FoldShape shape) {
  LOOM_RETURN_IF_ERROR(check_shape(slice, shape));
  LOOM_ASSIGN_OR_RETURN(std::vector<std::vector<int>> segments, fold_segments(slice, shape));
  std::vector<int> node_of;
  for (int d = 0; d < slice.num_devices; ++d)
    node_of.push_back(shape.devices_per_node > 0 ? full_device(shape, d, 0) / shape.devices_per_node : 0);
  const DeviceClasses classes =
      fold_classes(slice,
                   slice.class_of.size() == static_cast<std::size_t>(slice.num_devices)
                       ? DeviceClasses{slice.class_of, slice.representatives}
                       : device_classes(slice),
                   segments, node_of);
  const std::vector<char> kept = kept_devices(slice, classes);
  Unfolder unfolder(slice, shape, std::move(segments));
  for (int d = 0; d < slice.num_devices; ++d)
    if (kept[static_cast<std::size_t>(d)] != 0) unfolder.device(d);
  ExecPlan step = std::move(unfolder).take(classes);
  return FoldedStep{std::move(step), std::move(shape)};
}

}  // namespace loom::exec
