// One instruction of one device, with the semantics of include/loom/exec/exec_plan.h.
#include <algorithm>

#include <fmt/ranges.h>

#include "exec_machine.h"
#include "exec_semantics.h"
#include "loom/exec/exec_text.h"
#include "loom/exec/passes.h"
#include "plan_assembly.h"
#include "loom/plan/recompute.h"
#include "sub_op_runner.h"

namespace loom::verify::detail {

using exec::BufferId;
using plan::SubTensor;

Expected<const exec::Buffer*> Machine::buffer_of(int d, BufferId id) const {
  if (!id.valid() || id.index() >= exec_.buffers.size())
    return failf("buffer #{} does not exist ({} buffers)", id.valid() ? std::to_string(id.value) : "none", exec_.buffers.size());
  const exec::Buffer& buffer = exec_.buffer(id);
  if (buffer.device != d) return failf("{} is held by device {}, not {}", buffer_name(id), buffer.device, d);
  return &buffer;
}

Expected<const exec::Buffer*> Machine::readable(int d, BufferId id) const {
  LOOM_ASSIGN_OR_RETURN(const exec::Buffer* buffer, buffer_of(d, id));
  switch (state_[id.index()]) {
    case BufferState::unwritten: return failf("{} is read before it is written", buffer_name(id));
    case BufferState::freed: return failf("{} is read after it is freed", buffer_name(id));
    case BufferState::written: break;
  }
  return buffer;
}

Expected<PlanPiece> Machine::read(int d, BufferId id) const {
  LOOM_ASSIGN_OR_RETURN(const exec::Buffer* buffer, readable(d, id));
  return PlanPiece{buffer->piece, data_[id.index()]};
}

Expected<void> Machine::write(int d, BufferId id, NdArray value) {
  LOOM_ASSIGN_OR_RETURN(const exec::Buffer* buffer, buffer_of(d, id));
  if (state_[id.index()] != BufferState::unwritten) return failf("{} is written twice", buffer_name(id));
  if (value.shape != buffer->piece.local_shape())
    return failf("{} gets values of shape {}", buffer_name(id), value.shape.to_string());
  state_[id.index()] = BufferState::written;
  data_[id.index()] = std::move(value);
  return {};
}

Expected<Progress> Machine::step(int d) {
  return std::visit([&](const auto& i) { return execute(d, i); }, current(d));
}

Expected<Progress> Machine::execute(int d, const exec::Load& load) {
  LOOM_ASSIGN_OR_RETURN(const exec::Buffer* buffer, buffer_of(d, load.output));
  if (producer_[buffer->piece.tensor.index()].valid())
    return failf("{} is not of a leaf: only parameters, inputs and states are loaded", buffer_name(load.output));
  LOOM_ASSIGN_OR_RETURN(NdArray value, read_leaf(graph_, initial_, buffer->piece));
  LOOM_RETURN_IF_ERROR(write(d, load.output, std::move(value)));
  return advance(d);
}

Expected<Progress> Machine::execute(int d, const exec::Compute& compute) {
  if (!compute.sub_op.valid() || compute.sub_op.index() >= plan_.sub_ops.size())
    return failf("sub-op ${} does not exist", compute.sub_op.value);
  const plan::SubOp& s = plan_.sub_op(compute.sub_op);
  if (!s.live) return failf("sub-op '{}' was transformed into parts: it is not run", s.name);
  if (s.device != d) return failf("sub-op '{}' is assigned to device {}", s.name, s.device);
  // A recomputed sub-op (plan/recompute.h) runs a second time for its backward readers; one marked both
  // plainly and nested may run a third time (inside the layer's recomputation, and for its readers).
  const bool rerun = ++computed_[s.id.index()] > 1;
  const int most = plan::is_plain_recompute(plan_, s.id) && plan::is_nested_recompute(plan_, s.id) ? 3 : 2;
  if (rerun && (computed_[s.id.index()] > most || !plan::is_recomputed(plan_, s.id)))
    return failf("sub-op '{}' is computed {} times", s.name, computed_[s.id.index()]);
  if (compute.inputs.size() != s.inputs.size() || compute.outputs.size() != s.outputs.size())
    return failf("{} input and {} output buffers for a sub-op of {} inputs and {} outputs", compute.inputs.size(),
                 compute.outputs.size(), s.inputs.size(), s.outputs.size());
  const auto read_input = [&](std::size_t i) -> Expected<NdArray> {
    if (!compute.inputs[i].valid()) {
      // An offloaded step's 16-bit parameter: its update runs on the master copy, which never reads it.
      if (exec::unread_parameter(exec_, compute, i)) return NdArray(s.inputs[i].local_shape());
      return failf("input {} ({}) has no buffer", i, exec::piece_to_text(exec_, s.inputs[i]));
    }
    LOOM_ASSIGN_OR_RETURN(PlanPiece piece, read(d, compute.inputs[i]));
    // Which part of a decomposition a buffer holds is a name (exec_plan.h): the count must match, the
    // index need not.
    SubTensor wanted = s.inputs[i];
    wanted.value.index = piece.tensor.value.index;
    if (!same_piece(piece.tensor, wanted))
      return failf("input {} is {}, the sub-op reads {}", i, buffer_name(compute.inputs[i]),
                   exec::piece_to_text(exec_, s.inputs[i]));
    return std::move(piece.value);
  };
  LOOM_ASSIGN_OR_RETURN(std::vector<NdArray> outputs, run_sub_op(plan_, s, kernels_, read_input));
  for (std::size_t k = 0; k < s.outputs.size(); ++k) {
    LOOM_ASSIGN_OR_RETURN(const exec::Buffer* buffer, buffer_of(d, compute.outputs[k]));
    if (!same_piece(buffer->piece, s.outputs[k]))
      return failf("output {} is {}, the sub-op writes {}", k, buffer_name(compute.outputs[k]),
                   exec::piece_to_text(exec_, s.outputs[k]));
    if (!rerun) run_.pieces[s.outputs[k].tensor.index()].push_back(PlanPiece{s.outputs[k], outputs[k]});
    LOOM_RETURN_IF_ERROR(write(d, compute.outputs[k], std::move(outputs[k])));
  }
  return advance(d);
}

Expected<std::optional<std::vector<const exec::Collective*>>> Machine::collective_members(int d,
                                                                                         const exec::Collective& c) const {
  if (!comm::is_collective(c.kind)) return failf("'{}' is not a collective", comm::name(c.kind));
  for (auto m = c.group.begin(); m != c.group.end(); ++m)
    if (*m < 0 || *m >= exec_.num_devices || std::find(c.group.begin(), m, *m) != m)
      return failf("group member {} is not a device or repeated", *m);
  if (std::find(c.group.begin(), c.group.end(), d) == c.group.end()) return failf("device {} is not in its group", d);
  std::vector<const exec::Collective*> members;
  for (int m : c.group) {
    const auto* other = done(m) ? nullptr : std::get_if<exec::Collective>(&current(m));
    if (other == nullptr || other->tag != c.tag) return std::nullopt;  // not there yet (or never: a deadlock)
    if (other->kind != c.kind || other->group != c.group)
      return failf("members disagree on tag {}: {} is a {} over [{}]", c.tag, at(m), comm::name(other->kind),
                   fmt::join(other->group, ", "));
    members.push_back(other);
  }
  return members;
}

// Runs the collective for every member at once, when the last of them reaches it.
Expected<Progress> Machine::execute(int d, const exec::Collective& c) {
  LOOM_ASSIGN_OR_RETURN(auto members, collective_members(d, c));
  if (!members) return Progress::blocked;
  std::vector<PlanPiece> inputs;
  for (std::size_t m = 0; m < c.group.size(); ++m) {
    LOOM_ASSIGN_OR_RETURN(PlanPiece piece, with_context(read(c.group[m], (*members)[m]->input), at(c.group[m])));
    inputs.push_back(std::move(piece));
  }
  const bool sum = c.kind == comm::Primitive::all_reduce || c.kind == comm::Primitive::reduce_scatter;
  for (std::size_t m = 0; m < c.group.size(); ++m) {
    const int device = c.group[m];
    const BufferId id = (*members)[m]->output;
    LOOM_ASSIGN_OR_RETURN(const exec::Buffer* output, with_context(buffer_of(device, id), at(device)));
    for (const PlanPiece& input : inputs)
      if (input.tensor.tensor != output->piece.tensor)
        return failf("{}: input {} is not of the output's tensor '{}'", at(device),
                     exec::piece_to_text(exec_, input.tensor), graph_.tensor(output->piece.tensor).name);
    Expected<NdArray> value = sum ? sum_collective(output->piece, inputs) : gather_collective(output->piece, inputs);
    if (!value) return std::unexpected(with_context(value.error(), at(device) + ", " + buffer_name(id)));
    LOOM_RETURN_IF_ERROR(with_context(write(device, id, std::move(*value)), at(device)));
  }
  for (int m : c.group)
    if (m != d) advance(m);
  return advance(d);
}

// Reads this member's inputs now (it may free them before the others start), or, for a chained start,
// when the start writing the input completes; the start completes once the last member has started it
// and every input is read: each member's outputs get the sum (all-reduce), its box of the sum
// (reduce-scatter) or the placed inputs (all-gather), which its wait then lets it read.
Expected<Progress> Machine::execute(int d, const exec::CollectiveStart& start) {
  if (!exec::has_asynchronous_form(start.kind)) return failf("a {} has no asynchronous form", comm::name(start.kind));
  if (std::find(start.group.begin(), start.group.end(), d) == start.group.end()) return failf("device {} is not in its group", d);
  if (start.inputs.size() != start.outputs.size())
    return failf("{} inputs for {} outputs", start.inputs.size(), start.outputs.size());
  Started& s = started_[start.tag];
  if (s.first == nullptr) s.first = &start;
  if (s.first->kind != start.kind || s.first->group != start.group || s.first->inputs.size() != start.inputs.size())
    return failf("members disagree on start #{}: {} over [{}] with {} buffers here, {} over [{}] with {} on another",
                 start.tag, comm::name(start.kind), fmt::join(start.group, ", "), start.inputs.size(),
                 comm::name(s.first->kind), fmt::join(s.first->group, ", "), s.first->inputs.size());
  if (s.members.contains(d)) return failf("device {} starts #{} twice", d, start.tag);
  std::vector<PlanPiece>& mine = s.inputs[d];
  for (std::size_t i = 0; i < start.inputs.size(); ++i) {
    const BufferId in = start.inputs[i];
    if (const auto it = chained_reads_.find(in.value); it != chained_reads_.end()) {
      LOOM_RETURN_IF_ERROR(buffer_of(d, in));
      it->second.push_back(ChainedRead{start.tag, d, i});
      ++s.open_inputs;
      mine.emplace_back();
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(PlanPiece piece, read(d, in));
    mine.push_back(std::move(piece));
  }
  s.members.emplace(d, &start);
  for (BufferId out : start.outputs) chained_reads_.try_emplace(out.value);
  LOOM_RETURN_IF_ERROR(complete_start(start.tag));
  return advance(d);
}

Expected<void> Machine::complete_start(std::int64_t tag) {
  std::vector<std::int64_t> ready{tag};
  while (!ready.empty()) {
    Started& s = started_.at(ready.back());
    const std::int64_t t = ready.back();
    ready.pop_back();
    if (s.done || s.members.size() != s.first->group.size() || s.open_inputs > 0) continue;
    for (const auto& [member, theirs] : s.members)
      for (std::size_t i = 0; i < theirs->outputs.size(); ++i) {
        const BufferId id = theirs->outputs[i];
        LOOM_ASSIGN_OR_RETURN(const exec::Buffer* output, with_context(buffer_of(member, id), fmt::format("device {}", member)));
        std::vector<PlanPiece> parts;
        for (const auto& [from, pieces] : s.inputs) {
          if (pieces[i].tensor.tensor != output->piece.tensor)
            return failf("start #{}: input {} of device {} is not of '{}'", t, i, from, graph_.tensor(output->piece.tensor).name);
          parts.push_back(pieces[i]);
        }
        Expected<NdArray> value = s.first->kind == comm::Primitive::all_gather ? gather_collective(output->piece, parts)
                                                                               : sum_collective(output->piece, parts);
        if (!value) return std::unexpected(with_context(value.error(), fmt::format("device {}, {}", member, buffer_name(id))));
        LOOM_RETURN_IF_ERROR(with_context(write(member, id, std::move(*value)), fmt::format("device {}", member)));
        // The chained starts reading this output read it now.
        const auto node = chained_reads_.extract(id.value);
        if (node.empty()) continue;
        for (const ChainedRead& r : node.mapped()) {
          LOOM_ASSIGN_OR_RETURN(PlanPiece piece, read(r.device, id));
          Started& reader = started_.at(r.tag);
          reader.inputs[r.device][r.input] = std::move(piece);
          --reader.open_inputs;
          ready.push_back(r.tag);
        }
      }
    s.inputs.clear();
    s.done = true;
  }
  return {};
}

Expected<Progress> Machine::execute(int d, const exec::CollectiveWait& wait) {
  const auto it = started_.find(wait.tag);
  if (it == started_.end() || !it->second.members.contains(d))
    return failf("waits for #{}, which device {} has not started", wait.tag, d);
  if (!it->second.done) return Progress::blocked;
  return advance(d);
}

Expected<Progress> Machine::execute(int d, const exec::Send& send) {
  if (send.peer < 0 || send.peer >= exec_.num_devices) return failf("peer {} is not a device", send.peer);
  LOOM_ASSIGN_OR_RETURN(PlanPiece piece, read(d, send.buffer));
  mailbox_[{d, send.peer, send.tag}].push_back(Message{std::move(piece), pc(d)});
  return advance(d);
}

Expected<Progress> Machine::execute(int d, const exec::Recv& recv) {
  auto it = mailbox_.find({recv.peer, d, recv.tag});
  if (it == mailbox_.end()) return Progress::blocked;
  Message message = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) mailbox_.erase(it);
  LOOM_ASSIGN_OR_RETURN(const exec::Buffer* buffer, buffer_of(d, recv.buffer));
  if (!same_piece(buffer->piece, message.piece.tensor))
    return failf("{} receives {}, which device {} sent at instruction {}", buffer_name(recv.buffer),
                 exec::piece_to_text(exec_, message.piece.tensor), recv.peer, message.instruction);
  LOOM_RETURN_IF_ERROR(write(d, recv.buffer, std::move(message.piece.value)));
  return advance(d);
}

Expected<Progress> Machine::execute(int d, const exec::Local& local) {
  LOOM_ASSIGN_OR_RETURN(const exec::Buffer* output, buffer_of(d, local.output));
  const bool several = local.kind == exec::LocalKind::combine || local.kind == exec::LocalKind::accumulate;
  if (!several && local.inputs.size() != 1)
    return failf("a {} has {} inputs, not one", exec::name(local.kind), local.inputs.size());
  std::vector<PlanPiece> inputs;
  for (BufferId id : local.inputs) {
    LOOM_ASSIGN_OR_RETURN(PlanPiece piece, read(d, id));
    if (piece.tensor.tensor != output->piece.tensor)
      return failf("input {} is not of the output's tensor '{}'", buffer_name(id), graph_.tensor(output->piece.tensor).name);
    inputs.push_back(std::move(piece));
  }
  const SubTensor& out = output->piece;
  // A copy moves its piece between GPU and host memory: the identity, a slice of the whole box.
  const bool keeps_box = local.kind == exec::LocalKind::slice || local.kind == exec::LocalKind::copy;
  Expected<NdArray> value = keeps_box ? slice_local(out, inputs[0])
                            : local.kind == exec::LocalKind::scale ? scale_local(out, inputs[0])
                            : local.kind == exec::LocalKind::accumulate ? accumulate_local(out, inputs)
                                                                   : combine_local(out, inputs, graph_.tensor(out.tensor).name);
  if (!value) return std::unexpected(with_context(value.error(), buffer_name(local.output)));
  LOOM_RETURN_IF_ERROR(write(d, local.output, std::move(*value)));
  return advance(d);
}

Expected<Progress> Machine::execute(int d, const exec::Free& free) {
  LOOM_RETURN_IF_ERROR(readable(d, free.buffer));  // freeing an unwritten or freed buffer is as wrong as reading it
  state_[free.buffer.index()] = BufferState::freed;
  data_[free.buffer.index()] = NdArray();
  return advance(d);
}

}  // namespace loom::verify::detail
