// The Simulator's streams (simulator_core.h): each simulated device's compute and communication streams
// run their instructions in order from a worklist, each waiting for its inputs, its sender or its
// collective's members.
#include "simulator_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "loom/exec/exec_text.h"
#include "loom/exec/passes.h"

namespace loom::sim::detail {

using exec::BufferId;
using exec::Instruction;

Simulator::Simulator(const exec::ExecPlan& exec, const Durations& durations, const CommIndex& index,
                     std::vector<int> represented_by, bool folded)
    : exec_(exec), durations_(durations), index_(index), represented_by_(std::move(represented_by)), folded_(folded),
      slot_of_(static_cast<std::size_t>(exec.num_devices), -1), ready_(exec.buffers.size(), kUnknown),
      waiters_(exec.buffers.size()) {
  for (int d = 0; d < exec.num_devices; ++d) {
    if (represented_by_[static_cast<std::size_t>(d)] != d) continue;
    const std::size_t slot = slots_.size();
    slot_of_[static_cast<std::size_t>(d)] = static_cast<int>(slot);
    const auto& program = exec.programs[static_cast<std::size_t>(d)];
    slots_.push_back(Slot{d, std::vector<double>(program.size(), kUnknown), std::vector<double>(program.size(), kUnknown), {}, {}});
    Agent compute{d, slot, Stream::compute}, comm{d, slot, Stream::communication}, async{d, slot, Stream::communication},
        host{d, slot, Stream::host}, pcie{d, slot, Stream::pcie}, parameter_async{d, slot, Stream::communication};
    // The compute stream issues collectives and starts and waits at blocking collectives and waits; the
    // communication stream runs collectives, sends and recvs; the starts run in order on two streams of
    // their own, the parameters' and gradients' apart from the activations' (simulator.h).
    for (std::uint32_t i = 0; i < program.size(); ++i) {
      const Instruction& instruction = program[i];
      const auto* local = std::get_if<exec::Local>(&instruction);
      if (const auto* load = std::get_if<exec::Load>(&instruction)) {
        if (load->output.index() < ready_.size()) ready_[load->output.index()] = 0;
      } else if (exec::runs_on_host(exec, instruction)) {
        host.positions.push_back(i);
      } else if (local != nullptr && local->kind == exec::LocalKind::copy) {
        pcie.positions.push_back(i);
      } else if (std::holds_alternative<exec::Compute>(instruction) || std::holds_alternative<exec::Local>(instruction) ||
                 std::holds_alternative<exec::CollectiveWait>(instruction)) {
        compute.positions.push_back(i);
      } else if (std::holds_alternative<exec::Collective>(instruction)) {
        compute.positions.push_back(i);
        comm.positions.push_back(i);
      } else if (const auto* start = std::get_if<exec::CollectiveStart>(&instruction)) {
        compute.positions.push_back(i);
        (moves_parameters(*start) ? parameter_async : async).positions.push_back(i);
        if (!start->outputs.empty()) slots_.back().started.emplace(start->tag, start->outputs.front());
      } else if (!std::holds_alternative<exec::Free>(instruction)) {
        comm.positions.push_back(i);
      }
    }
    agents_.push_back(std::move(compute));
    agents_.push_back(std::move(comm));
    agents_.push_back(std::move(async));
    agents_.push_back(std::move(host));
    agents_.push_back(std::move(pcie));
    agents_.push_back(std::move(parameter_async));
  }
}

bool Simulator::moves_parameters(const exec::CollectiveStart& start) const {
  if (exec_.plan == nullptr || exec_.plan->graph == nullptr || start.outputs.empty()) return false;
  const BufferId out = start.outputs.front();
  if (out.index() >= exec_.buffers.size()) return false;
  const ir::Graph& graph = *exec_.plan->graph;
  const ir::FullTensor& tensor = graph.tensor(exec_.buffer(out).piece.tensor);
  if (tensor.role == ir::TensorRole::parameter) return true;
  return ir::is_parameter_gradient(graph, tensor.id);
}

Expected<void> Simulator::run() {
  for (std::size_t a = agents_.size(); a-- > 0;) wake(a);
  while (!worklist_.empty()) {
    const std::size_t a = worklist_.back();
    worklist_.pop_back();
    agents_[a].queued = false;
    LOOM_RETURN_IF_ERROR(advance(a));
  }
  return check_finished();
}

double Simulator::ready_or_wait(BufferId buffer, std::size_t a) {
  if (buffer == exec::kNoBuffer || buffer.index() >= ready_.size()) return 0;
  const double t = ready_[buffer.index()];
  if (t == kUnknown) waiters_[buffer.index()].push_back(a);
  return t;
}

void Simulator::write(BufferId buffer, double time) {
  if (buffer == exec::kNoBuffer || buffer.index() >= ready_.size()) return;
  ready_[buffer.index()] = time;
  for (std::size_t a : waiters_[buffer.index()]) wake(a);
  waiters_[buffer.index()].clear();
}

Expected<double> Simulator::checked(double duration, const Agent& agent) const {
  if (std::isfinite(duration) && duration >= 0) return duration;
  return fail(fmt::format("a duration of {} for device {}'s instruction {} ({})", duration, agent.device,
                          position(agent), exec::instruction_to_text(exec_, at(agent))),
              "durations must be finite and not negative");
}

std::string Simulator::sub_op_name(plan::SubOpId id) const {
  if (exec_.plan != nullptr && id.index() < exec_.plan->sub_ops.size()) return exec_.plan->sub_op(id).name;
  return fmt::format("sub-op #{}", id.index());
}

Expected<void> Simulator::advance(std::size_t a) {
  Agent& agent = agents_[a];
  if (agent.parked) return {};
  while (agent.pc < agent.positions.size()) {
    const Instruction& instruction = at(agent);
    if (const auto* c = std::get_if<exec::Compute>(&instruction)) {
      double start = agent.free;
      for (BufferId b : c->inputs) {
        const double t = ready_or_wait(b, a);
        if (t == kUnknown) return {};
        start = std::max(start, t);
      }
      const bool host = agent.stream == Stream::host;
      const auto& price = host ? durations_.host_compute : durations_.compute;
      if (!price) return fail(host ? "the plan has host computes (offloaded steps) but Durations::host_compute is not set"
                                   : "the plan has computes but Durations::compute is not set");
      if (exec_.plan == nullptr || c->sub_op.index() >= exec_.plan->sub_ops.size())
        return fail(fmt::format("device {}'s instruction {} computes a sub-op the plan does not have", agent.device,
                                position(agent)),
                    "simulate an ExecPlan whose plan pointer is set (materialize sets it)");
      LOOM_ASSIGN_OR_RETURN(const double duration, checked(price(exec_.plan->sub_op(c->sub_op), agent.device), agent));
      finish(agent, EventKind::compute, sub_op_name(c->sub_op), start, start + duration, c->outputs);
    } else if (const auto* l = std::get_if<exec::Local>(&instruction)) {
      double start = agent.free;
      for (BufferId b : l->inputs) {
        const double t = ready_or_wait(b, a);
        if (t == kUnknown) return {};
        start = std::max(start, t);
      }
      double duration = 0;
      if (l->kind == exec::LocalKind::copy) {
        if (!durations_.copy) return fail("the plan has copies between GPU and host but Durations::copy is not set");
        LOOM_ASSIGN_OR_RETURN(duration, checked(durations_.copy(bytes(l->output), agent.device), agent));
        const bool to_host = exec_.buffer(l->output).memory == exec::Memory::host;
        finish(agent, EventKind::copy, to_host ? "copy to host" : "copy to device", start, start + duration,
               std::span(&l->output, 1));
        continue;
      }
      if (durations_.local) {
        LOOM_ASSIGN_OR_RETURN(duration, checked(durations_.local(*l, bytes(l->output)), agent));
      }
      finish(agent, EventKind::local, std::string(exec::name(l->kind)), start, start + duration, std::span(&l->output, 1));
    } else if (agent.stream == Stream::compute && exec::is_collective_call(instruction)) {
      issue_collective(agent);
      const auto* c = std::get_if<exec::Collective>(&instruction);
      if (c != nullptr && !hold_until(a, c->output)) return {};  // blocking: held until it ends
      if (c == nullptr) ++agent.pc;                                // a start: compute goes on
    } else if (const auto* w = std::get_if<exec::CollectiveWait>(&instruction)) {
      const auto it = slots_[agent.slot].started.find(w->tag);
      if (it == slots_[agent.slot].started.end())
        return fail(fmt::format("device {}'s instruction {} waits for tag {}, which it never starts", agent.device,
                                position(agent), w->tag),
                    "check the plan with check_exec_plan");
      if (!hold_until(a, it->second)) return {};
    } else if (const auto c = exec::collective_call(instruction)) {
      // Issued by the compute stream (which ran everything before it), with its inputs ready.
      const double issued = slots_[agent.slot].issued[position(agent)];
      if (issued == kUnknown) return {};  // the compute stream wakes this stream when it issues it
      double arrival = std::max(agent.free, issued);
      for (BufferId b : c->inputs) {
        const double t = ready_or_wait(b, a);
        if (t == kUnknown) return {};
        arrival = std::max(arrival, t);
      }
      return arrive(a, *c, arrival);  // parked: the last arrival releases the members
    } else if (const auto* s = std::get_if<exec::Send>(&instruction)) {
      const double input = ready_or_wait(s->buffer, a);
      if (input == kUnknown) return {};
      const double issue = std::max(agent.free, input);
      if (!durations_.p2p) return fail("the plan has sends but Durations::p2p is not set");
      LOOM_ASSIGN_OR_RETURN(const double duration, checked(durations_.p2p(agent.device, s->peer, bytes(s->buffer)), agent));
      LOOM_RETURN_IF_ERROR(reach(agent.slot, position(agent), issue));  // wakes the recvs waiting for it
      LOOM_ASSIGN_OR_RETURN(const double end, stretched(agent.slot, issue, duration));
      finish(agent, EventKind::send, fmt::format("send -> {} #{}", s->peer, s->tag), issue, end, {});
    } else {
      const auto& r = std::get<exec::Recv>(instruction);
      const std::optional<std::uint32_t> sent = is_device(r.peer) ? index_.send(r.peer, agent.device, r.tag) : std::nullopt;
      if (!sent)
        return fail(fmt::format("device {}'s instruction {} ({}) has no matching send on device {}", agent.device,
                                position(agent), exec::instruction_to_text(exec_, instruction), r.peer),
                    "check the plan with check_exec_plan");
      const std::size_t sender = slot_for(r.peer);
      const double issue = reached(sender, *sent);
      if (issue == kUnknown) {
        waiters_at_[key(sender, *sent)].push_back(Waiter{false, static_cast<std::int64_t>(a)});
        return {};
      }
      if (!durations_.p2p) return fail("the plan has recvs but Durations::p2p is not set");
      LOOM_ASSIGN_OR_RETURN(const double duration, checked(durations_.p2p(r.peer, agent.device, bytes(r.buffer)), agent));
      const double start = std::max(agent.free, issue);
      LOOM_ASSIGN_OR_RETURN(const double end, stretched(agent.slot, start, duration));
      finish(agent, EventKind::recv, fmt::format("recv <- {} #{}", r.peer, r.tag), start, end, std::span(&r.buffer, 1));
    }
  }
  return {};
}

void Simulator::issue_collective(const Agent& agent) {
  double& issued = slots_[agent.slot].issued[position(agent)];
  if (issued != kUnknown) return;
  issued = agent.free;
  const auto* start = std::get_if<exec::CollectiveStart>(&at(agent));
  const std::size_t stream =
      start == nullptr ? kCommunicationAgent : (moves_parameters(*start) ? kParameterStartsAgent : kStartsAgent);
  wake(kAgentsPerSlot * agent.slot + stream);
}

bool Simulator::hold_until(std::size_t a, BufferId buffer) {
  const double t = ready_or_wait(buffer, a);
  if (t == kUnknown) return false;
  Agent& agent = agents_[a];
  agent.free = std::max(agent.free, t);
  ++agent.pc;
  return true;
}

void Simulator::finish(Agent& agent, EventKind kind, std::string name, double start, double end,
                       std::span<const BufferId> outputs) {
  if (kind != EventKind::local || end > start)
    events_.push_back(Event{agent.device, agent.stream, kind, std::move(name), start, end, static_cast<int>(position(agent))});
  if (agent.stream == Stream::compute && end > start) slots_[agent.slot].busy.emplace_back(start, end);
  agent.free = end;
  ++agent.pc;
  for (BufferId b : outputs) write(b, end);
}

Expected<void> Simulator::reach(std::size_t slot, std::uint32_t position, double time) {
  slots_[slot].reached[position] = time;
  const auto it = waiters_at_.find(key(slot, position));
  if (it == waiters_at_.end()) return {};
  const std::vector<Waiter> waiting = std::move(it->second);
  waiters_at_.erase(it);
  for (const Waiter& w : waiting) {
    if (!w.collective) {
      wake(static_cast<std::size_t>(w.id));
      continue;
    }
    PendingCollective& pending = pending_.at(w.id);
    pending.start = std::max(pending.start, time);
    if (--pending.missing == 0) LOOM_RETURN_IF_ERROR(release(w.id));
  }
  return {};
}

// The compute stream is first run as far as it can go: it then waits for this communication or a later
// one on its device, so it stays idle past its last recorded interval until this one ends.
Expected<double> Simulator::stretched(std::size_t slot, double start, double duration) {
  const double factor = durations_.contention;
  if (factor == 1 || duration == 0) return start + duration;
  Agent& compute = agents_[kAgentsPerSlot * slot];
  if (compute.queued) LOOM_RETURN_IF_ERROR(advance(kAgentsPerSlot * slot));
  const auto& busy = slots_[slot].busy;
  auto it = std::ranges::upper_bound(busy, start, {}, &std::pair<double, double>::second);
  double t = start, left = duration;
  for (; it != busy.end(); ++it) {
    const double from = std::max(it->first, t);
    if (left <= from - t) return t + left;  // done in the gap before this interval
    left -= from - t;
    if (left <= (it->second - from) / factor) return from + left * factor;
    left -= (it->second - from) / factor;
    t = it->second;
  }
  return t + left;
}

Expected<void> Simulator::check_finished() const {
  std::vector<std::string> stuck;
  for (const Agent& agent : agents_) {
    if (agent.pc >= agent.positions.size()) continue;
    stuck.push_back(fmt::format("device {} ({} stream) at instruction {}: {}", agent.device, name(agent.stream),
                                position(agent), exec::instruction_to_text(exec_, at(agent))));
  }
  if (stuck.empty()) return {};
  std::string message = "deadlock: ";
  for (std::size_t i = 0; i < stuck.size() && i < 8; ++i) message += (i ? "; " : "") + stuck[i];
  if (stuck.size() > 8) message += fmt::format("; and {} more streams", stuck.size() - 8);
  return fail(std::move(message), "check the plan with check_exec_plan; materialized plans cannot hang");
}

}  // namespace loom::sim::detail
