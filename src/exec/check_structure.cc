// The structural half of check_exec_plan (check.h): one walk over each device's program in order,
// tracking each buffer's state and recording transfers and collective members for the matching. A walk
// touches only its own device's buffers (local_buffer refuses any other before reading a state), so the
// devices are walked on both cores; the first failing device's error is the serial walk's, and the sites
// are matched in device order, as one walk would meet them.
#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "check_internal.h"
#include "loom/core/both_cores.h"
#include "loom/exec/exec_text.h"
#include "loom/exec/instruction_buffers.h"
#include "loom/exec/passes.h"

namespace loom::exec::detail {
namespace {

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
constexpr const char* kWriters = "a load, compute, collective, start, recv or local instruction";

// pending: written by a start whose wait has not come yet (readable after it).
enum class State : std::uint8_t { unwritten, written, pending, freed };

Expected<void> check_shape(const ExecPlan& exec) {
  if (exec.plan == nullptr || exec.plan->graph == nullptr)
    return fail("the exec plan has no plan (or its plan no graph)", "materialize sets ExecPlan::plan; keep the plan alive");
  if (exec.num_devices < 1)
    return fail(fmt::format("the exec plan has {} devices", exec.num_devices), "a plan needs at least one device");
  if (exec.programs.size() != static_cast<std::size_t>(exec.num_devices))
    return fail(fmt::format("the exec plan has {} devices but {} programs", exec.num_devices, exec.programs.size()),
                "give every device one program, possibly empty");
  return {};
}

// What the devices' walks share. By buffer: its state, and the instruction (on its device) that wrote / freed
// it, each written only by the walk of the buffer's own device.
struct Shared {
  std::vector<State> state;
  std::vector<std::uint32_t> writer, freer;
  std::vector<int> device_of;       // by buffer
  std::vector<ir::OpId> producers;  // by tensor: loads are of leaves
  Links links;                      // its offsets, during the walks
};

// Also copies each buffer's device into a flat array: the walk asks for it at every operand, and a
// Buffer (with its heap-held box) is far larger than the int.
Expected<void> check_buffers(const ExecPlan& exec, std::vector<int>& device_of) {
  const ir::Graph& graph = *exec.plan->graph;
  device_of.reserve(exec.buffers.size());
  for (std::size_t b = 0; b < exec.buffers.size(); ++b) {
    const Buffer& buffer = exec.buffers[b];
    device_of.push_back(buffer.device);
    if (buffer.device < 0 || buffer.device >= exec.num_devices)
      return fail(fmt::format("buffer b{} is on device {}, but the plan has {} devices", b, buffer.device, exec.num_devices),
                  "place every buffer on a device of the plan");
    const ir::TensorId t = buffer.piece.tensor;
    if (!t.valid() || t.index() >= graph.tensors.size())
      return fail(fmt::format("buffer b{} holds tensor %{}, which the graph does not have", b, t.value),
                  "a buffer holds a SubTensor of one of the plan's graph tensors");
    if (buffer.piece.box.size() != graph.tensor(t).shape.rank())
      return fail(fmt::format("buffer b{} ({}) has a box of {} dims, but the tensor has {}", b,
                              piece_to_text(exec, buffer.piece), buffer.piece.box.size(), graph.tensor(t).shape.rank()),
                  "a box has one range per dimension of its tensor");
  }
  return {};
}

Expected<void> check_all_written(const ExecPlan& exec, const std::vector<State>& state) {
  for (std::size_t b = 0; b < exec.buffers.size(); ++b)
    if (state[b] == State::unwritten)
      return fail(fmt::format("buffer {} on device {} is never written", buffer_to_text(exec, BufferId(static_cast<std::uint32_t>(b))),
                              exec.buffers[b].device),
                  fmt::format("every buffer has exactly one writer: {} on its device", kWriters));
  return {};
}

// One device's walk: its instructions in order, recording the sites it meets.
class DeviceWalk {
 public:
  DeviceWalk(const ExecPlan& exec, Shared& shared, int device)
      : exec_(exec), device_(device), state_(shared.state), writer_(shared.writer), freer_(shared.freer),
        device_of_(shared.device_of), producers_(shared.producers), links_(shared.links) {}

  Expected<void> run() {
    const auto& program = exec_.programs[static_cast<std::size_t>(device_)];
    for (index_ = 0; index_ < program.size(); ++index_) {
      LOOM_RETURN_IF_ERROR(check_memory(program[index_]));
      LOOM_RETURN_IF_ERROR(std::visit([this](const auto& i) { return check(i); }, program[index_]));
    }
    return check_all_waited();
  }

  std::vector<TransferSite> transfers_;
  std::vector<CollectiveSite> collectives_;
  std::vector<CollectiveSite> waits_;

 private:

  // exec_plan.h's memories: a copy crosses between GPU and host; a host compute (an offloaded optimizer
  // step) touches host buffers alone; every other instruction but a load and a free, GPU buffers alone.
  Expected<void> check_memory(const Instruction& instruction) const {
    if (std::holds_alternative<Load>(instruction) || std::holds_alternative<Free>(instruction)) return {};
    const auto memory = [&](BufferId b) { return b.index() < exec_.buffers.size() ? exec_.buffer(b).memory : Memory::gpu; };
    if (const auto* l = std::get_if<Local>(&instruction); l != nullptr && l->kind == LocalKind::copy) {
      if (l->inputs.size() != 1) return error(fmt::format("copies {} buffers", l->inputs.size()), "a copy moves one buffer");
      if (memory(l->inputs.front()) == memory(l->output))
        return error(fmt::format("copies {} within {} memory", buffer_to_text(exec_, l->inputs.front()), name(memory(l->output))),
                     "a copy moves a piece between the GPU and its host; use a slice within one memory");
      const plan::SubTensor& in = exec_.buffer(l->inputs.front()).piece;
      const plan::SubTensor& out = exec_.buffer(l->output).piece;
      if (in.tensor != out.tensor || in.value != out.value || !same_box(in.box, out.box))
        return error(fmt::format("copies {} into {}, another piece", buffer_to_text(exec_, l->inputs.front()),
                                 buffer_to_text(exec_, l->output)),
                     "a copy's output holds its input's piece");
      return {};
    }
    const Memory runs_in = runs_on_host(exec_, instruction) ? Memory::host : Memory::gpu;
    if (runs_in == Memory::host && exec_.plan->op_of(std::get<Compute>(instruction).sub_op).pass != ir::Pass::optimizer)
      return error(fmt::format("runs '{}' on the host", exec_.plan->sub_op(std::get<Compute>(instruction).sub_op).name),
                   "only optimizer steps run on the host (offload_to_host); keep the other buffers in GPU memory");
    std::optional<BufferId> stray;
    const auto look = [&](BufferId b) {
      if (!stray && memory(b) != runs_in) stray = b;
    };
    for_each_read(instruction, look);
    for_each_written(instruction, look);
    if (stray)
      return error(fmt::format("runs in {} memory but touches {} buffer {}", name(runs_in), name(memory(*stray)),
                               buffer_to_text(exec_, *stray)),
                   "copy the buffer to the memory its reader runs in first (a copy instruction)");
    return {};
  }

  std::unexpected<Error> error(std::string what, std::string hint) const {
    return fail(fmt::format("{}: {}", site_to_text(exec_, device_, index_), what), std::move(hint));
  }
  std::uint32_t global() const { return links_.global(device_, static_cast<std::uint32_t>(index_)); }

  // The buffer exists and lives on this instruction's device.
  Expected<void> local_buffer(BufferId id) const {
    if (!id.valid()) return error("refers to no buffer", "every operand but a compute's shape-only inputs needs a buffer");
    if (id.index() >= exec_.buffers.size())
      return error(fmt::format("refers to buffer b{}, but the plan has {} buffers", id.value, exec_.buffers.size()),
                   "create buffers with ExecPlan::add_buffer");
    if (device_of_[id.index()] != device_)
      return error(fmt::format("uses {}, which lives on device {}", buffer_to_text(exec_, id), device_of_[id.index()]),
                   "an instruction touches only its own device's buffers; move data with send/recv or a collective");
    return {};
  }

  Expected<void> read(BufferId id) const {
    LOOM_RETURN_IF_ERROR(local_buffer(id));
    if (state_[id.index()] == State::unwritten)
      return error(fmt::format("reads {} before it is written", buffer_to_text(exec_, id)),
                   fmt::format("write every buffer ({}) earlier in its device's program than any read", kWriters));
    if (state_[id.index()] == State::freed)
      return error(fmt::format("reads {} after it is freed (by instruction {})", buffer_to_text(exec_, id), freer_[id.index()]),
                   "free a buffer after its last read");
    if (state_[id.index()] == State::pending) return before_wait("reads", id);
    return {};
  }

  std::unexpected<Error> before_wait(std::string_view what, BufferId id) const {
    return error(fmt::format("{} {}, which the start at instruction {} writes, before its wait", what,
                             buffer_to_text(exec_, id), writer_[id.index()]),
                 "read (or free) a start's outputs only after the wait of its tag");
  }

  Expected<void> write(BufferId id) {
    LOOM_RETURN_IF_ERROR(local_buffer(id));
    if (state_[id.index()] != State::unwritten)
      return error(fmt::format("{} is written twice (first by instruction {})", buffer_to_text(exec_, id), writer_[id.index()]),
                   "buffers are written once: give each write its own buffer");
    state_[id.index()] = State::written;
    writer_[id.index()] = static_cast<std::uint32_t>(index_);
    return {};
  }

  Expected<void> check(const Free& f) {
    LOOM_RETURN_IF_ERROR(local_buffer(f.buffer));
    const std::size_t b = f.buffer.index();
    if (state_[b] == State::unwritten)
      return error(fmt::format("frees {} before it is written", buffer_to_text(exec_, f.buffer)), "free a buffer after its last read");
    if (state_[b] == State::freed)
      return error(fmt::format("{} is freed twice (first by instruction {})", buffer_to_text(exec_, f.buffer), freer_[b]),
                   "free each buffer at most once");
    if (state_[b] == State::pending) return before_wait("frees", f.buffer);
    state_[b] = State::freed;
    freer_[b] = static_cast<std::uint32_t>(index_);
    return {};
  }

  Expected<void> check(const Load& l) {
    LOOM_RETURN_IF_ERROR(write(l.output));
    const ir::TensorId t = exec_.buffer(l.output).piece.tensor;
    if (producers_[t.index()].valid())
      return error(fmt::format("loads a piece of '{}', which op '{}' computes", exec_.plan->graph->tensor(t).name,
                               exec_.plan->graph->op(producers_[t.index()]).name),
                   "load only leaves (inputs, parameters, states); compute or receive the rest");
    return {};
  }

  Expected<void> check(const Compute& c) {
    const plan::Plan& plan = *exec_.plan;
    if (c.sub_op.index() >= plan.sub_ops.size())
      return error(fmt::format("runs sub-op ${}, but the plan has {} sub-ops", c.sub_op.value, plan.sub_ops.size()),
                   "computes name sub-ops of ExecPlan::plan");
    const plan::SubOp& s = plan.sub_op(c.sub_op);
    if (!s.live) return error(fmt::format("runs sub-op '{}', which is no longer live", s.name), "run the parts it was transformed into");
    if (s.device != device_)
      return error(fmt::format("runs sub-op '{}', which is assigned to device {}", s.name, s.device),
                   "emit each compute in its sub-op's device's program");
    if (c.inputs.size() != s.inputs.size() || c.outputs.size() != s.outputs.size())
      return error(fmt::format("gives '{}' {} inputs and {} outputs, but it has {} and {}", s.name, c.inputs.size(),
                               c.outputs.size(), s.inputs.size(), s.outputs.size()),
                   "align the buffers with the sub-op's inputs and outputs");
    const plan::OpLayout& layout = plan.layouts[s.op.index()];
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
      const plan::SubTensor& want = s.inputs[i];
      if (c.inputs[i] == kNoBuffer) {
        if (layout.shape_only(i) || unread_parameter(exec_, c, i)) continue;
        return error(fmt::format("has no buffer for input {} of '{}' ({}), which it reads", i, s.name, piece_to_text(exec_, want)),
                     "kNoBuffer is only for shape-only inputs");
      }
      LOOM_RETURN_IF_ERROR(read(c.inputs[i]));
      const plan::SubTensor& got = exec_.buffer(c.inputs[i]).piece;
      if (got.tensor != want.tensor || !same_box(got.box, want.box) || got.value.count != want.value.count)
        return error(fmt::format("input {} of '{}' is {}, but the sub-op reads {}", i, s.name, buffer_to_text(exec_, c.inputs[i]),
                                 piece_to_text(exec_, want)),
                     "an input buffer holds the input's box and a value part of the same count");
    }
    for (std::size_t i = 0; i < c.outputs.size(); ++i) {
      LOOM_RETURN_IF_ERROR(write(c.outputs[i]));
      if (!same_piece(exec_.buffer(c.outputs[i]).piece, s.outputs[i]))
        return error(fmt::format("output {} of '{}' is {}, but the sub-op writes {}", i, s.name,
                                 buffer_to_text(exec_, c.outputs[i]), piece_to_text(exec_, s.outputs[i])),
                     "an output buffer holds exactly the sub-op's output SubTensor");
    }
    return {};
  }

  Expected<void> check(const Local& l) {
    for (BufferId in : l.inputs) LOOM_RETURN_IF_ERROR(read(in));
    LOOM_RETURN_IF_ERROR(write(l.output));
    const plan::SubTensor& out = exec_.buffer(l.output).piece;
    if (l.kind == LocalKind::combine || l.kind == LocalKind::accumulate) {
      if (l.inputs.empty()) return error("combines no inputs", "a combine assembles its output from at least one buffer");
      for (BufferId in : l.inputs)
        if (exec_.buffer(in).piece.tensor != out.tensor)
          return error(fmt::format("combines {} into a piece of another tensor", buffer_to_text(exec_, in)),
                       "a combine sums and concatenates pieces of its output's tensor");
      if (l.kind == LocalKind::accumulate) {
        // A running sum's step adds terms of its own box; a single term is a copy, not a step.
        if (l.inputs.size() < 2)
          return error("accumulates a single buffer", "an accumulate adds a new term to the running sum so far");
        for (BufferId in : l.inputs)
          if (!same_box(exec_.buffer(in).piece.box, out.box))
            return error(fmt::format("accumulates {}, whose box is not the running sum's", buffer_to_text(exec_, in)),
                         "an accumulate sums terms of the output's box as is; slice or combine the others first");
      }
      return {};
    }
    if (l.inputs.size() != 1)
      return error(fmt::format("has {} inputs, but a {} has one", l.inputs.size(), name(l.kind)), "use a combine to assemble several");
    const plan::SubTensor& in = exec_.buffer(l.inputs.front()).piece;
    if (l.kind == LocalKind::scale && (in.tensor != out.tensor || !same_box(in.box, out.box)))
      return error("scales into a different box", "a scale changes only the value part; slice to change the box");
    if (l.kind == LocalKind::slice && (in.tensor != out.tensor || in.value != out.value || !box_contains(in.box, out.box)))
      return error("slices a box outside its input, or changes the value part",
                   "a slice keeps the value part and restricts the box to one inside the input's");
    return {};
  }

  Expected<void> check(const Send& s) {
    LOOM_RETURN_IF_ERROR(peer(s.peer));
    LOOM_RETURN_IF_ERROR(read(s.buffer));
    transfers_.push_back({device_, s.peer, s.tag, false, global()});
    return {};
  }
  Expected<void> check(const Recv& r) {
    LOOM_RETURN_IF_ERROR(peer(r.peer));
    LOOM_RETURN_IF_ERROR(write(r.buffer));
    transfers_.push_back({r.peer, device_, r.tag, true, global()});
    return {};
  }
  Expected<void> peer(int p) const {
    if (p < 0 || p >= exec_.num_devices)
      return error(fmt::format("has peer {}, but the plan has {} devices", p, exec_.num_devices), "a peer is a device of the plan");
    if (p == device_) return error("has itself as peer", "data already on the device needs no transfer");
    return {};
  }

  Expected<void> check(const Collective& c) {
    if (!comm::is_collective(c.kind))
      return error(fmt::format("has kind {}, which is not a collective", comm::name(c.kind)),
                   "collectives are all-reduce, all-gather, reduce-scatter and all-to-all");
    if (std::find(c.group.begin(), c.group.end(), device_) == c.group.end())
      return error(fmt::format("is not run by a member of its group: device {} is not in it", device_),
                   "a collective runs on exactly the devices of its group");
    LOOM_RETURN_IF_ERROR(read(c.input));
    LOOM_RETURN_IF_ERROR(write(c.output));
    collectives_.push_back({c.tag, global()});
    return {};
  }

  Expected<void> check(const CollectiveStart& c) {
    if (!has_asynchronous_form(c.kind))
      return error(fmt::format("starts a {}, which has no asynchronous form", comm::name(c.kind)),
                   "start an all-reduce, an all-gather or a reduce-scatter, or run the collective blocking");
    if (std::find(c.group.begin(), c.group.end(), device_) == c.group.end())
      return error(fmt::format("is not run by a member of its group: device {} is not in it", device_),
                   "a collective runs on exactly the devices of its group");
    if (c.inputs.empty() || c.inputs.size() != c.outputs.size())
      return error(fmt::format("starts {} inputs into {} outputs", c.inputs.size(), c.outputs.size()),
                   "a start moves at least one buffer, one output per input");
    // A chained start may read an earlier start's output before that start's wait (exec_plan.h).
    for (BufferId in : c.inputs)
      if (!local_buffer(in) || state_[in.index()] != State::pending) LOOM_RETURN_IF_ERROR(read(in));
    for (BufferId out : c.outputs) {
      LOOM_RETURN_IF_ERROR(write(out));
      state_[out.index()] = State::pending;
    }
    if (!starts_.try_emplace(c.tag, Started{index_, &c, false}).second)
      return error(fmt::format("starts tag {} twice on this device", c.tag), "give each collective its own tag");
    collectives_.push_back({c.tag, global()});
    return {};
  }

  Expected<void> check(const CollectiveWait& w) {
    const auto it = starts_.find(w.tag);
    if (it == starts_.end())
      return error(fmt::format("waits for tag {}, which no earlier start of this device has", w.tag),
                   "a wait follows its start of the same tag on the same device");
    if (it->second.waited)
      return error(fmt::format("waits for tag {} a second time", w.tag), "each start has exactly one wait");
    it->second.waited = true;
    for (BufferId out : it->second.start->outputs) state_[out.index()] = State::written;
    waits_.push_back({w.tag, global()});
    return {};
  }

  // The first start (in program order) left without its wait.
  Expected<void> check_all_waited() const {
    const Started* first = nullptr;
    for (const auto& [tag, started] : starts_)
      if (!started.waited && (first == nullptr || started.index < first->index)) first = &started;
    if (first == nullptr) return {};
    return fail(fmt::format("{}: start #{} is never waited for", site_to_text(exec_, device_, first->index), first->start->tag),
                "each start has exactly one wait of its tag, later on its device");
  }

  const ExecPlan& exec_;
  const int device_;
  std::size_t index_ = 0;
  std::vector<State>& state_;
  std::vector<std::uint32_t>& writer_;
  std::vector<std::uint32_t>& freer_;
  const std::vector<int>& device_of_;
  const std::vector<ir::OpId>& producers_;
  const Links& links_;
  struct Started {
    std::size_t index = 0;
    const CollectiveStart* start = nullptr;
    bool waited = false;
  };
  std::unordered_map<std::int64_t, Started> starts_;  // by tag, this device's
};

}  // namespace

bool box_contains(const std::vector<plan::IndexRange>& outer, const std::vector<plan::IndexRange>& inner) {
  if (outer.size() != inner.size()) return false;
  for (std::size_t d = 0; d < outer.size(); ++d)
    if (!plan::contains(outer[d], inner[d])) return false;
  return true;
}

Expected<Links> check_structure(const ExecPlan& exec) {
  LOOM_RETURN_IF_ERROR(check_shape(exec));
  Shared shared;
  LOOM_RETURN_IF_ERROR(check_buffers(exec, shared.device_of));
  shared.state.assign(exec.buffers.size(), State::unwritten);
  shared.writer.assign(exec.buffers.size(), kNone);
  shared.freer.assign(exec.buffers.size(), kNone);
  shared.producers = ir::producers(*exec.plan->graph);
  Links& links = shared.links;
  std::size_t total = 0;
  links.offsets.push_back(0);
  for (const auto& program : exec.programs) {
    total += program.size();
    if (total >= kNone)
      return fail(fmt::format("the exec plan has {} instructions or more, too many to check", total),
                  "split the step into smaller plans");
    links.offsets.push_back(static_cast<std::uint32_t>(total));
  }
  std::vector<std::optional<DeviceWalk>> walks(exec.programs.size());
  std::vector<Expected<void>> walked(exec.programs.size());
  for_each_on_both_cores(walks.size(), [&](std::size_t d) {
    walked[d] = walks[d].emplace(exec, shared, static_cast<int>(d)).run();
  });
  for (const Expected<void>& w : walked) LOOM_RETURN_IF_ERROR(w);  // the first failing device's
  std::vector<TransferSite> transfers;
  std::vector<CollectiveSite> collectives, waits;
  for (std::optional<DeviceWalk>& walk : walks) {
    transfers.insert(transfers.end(), walk->transfers_.begin(), walk->transfers_.end());
    collectives.insert(collectives.end(), walk->collectives_.begin(), walk->collectives_.end());
    waits.insert(waits.end(), walk->waits_.begin(), walk->waits_.end());
    walk.reset();
  }
  links.link.assign(total, kNone);
  // Unmatched collectives and transfers first: a buffer left unwritten is usually their consequence.
  LOOM_RETURN_IF_ERROR(match_collectives(exec, collectives, waits, links));
  LOOM_RETURN_IF_ERROR(match_transfers(exec, transfers, links));
  LOOM_RETURN_IF_ERROR(check_all_written(exec, shared.state));
  return std::move(links);
}

}  // namespace loom::exec::detail
