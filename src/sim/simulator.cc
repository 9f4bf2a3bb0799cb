#include "loom/sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <unordered_map>

#include "loom/exec/exec_text.h"

namespace loom::sim {

std::string_view name(Stream stream) { return stream == Stream::compute ? "compute" : "communication"; }

std::string_view name(EventKind kind) {
  switch (kind) {
    case EventKind::compute: return "compute";
    case EventKind::local: return "local";
    case EventKind::collective: return "collective";
    case EventKind::send: return "send";
    case EventKind::recv: return "recv";
  }
  return "?";
}

double SimResult::idle_fraction() const {
  if (devices.empty() || step_time <= 0) return 0;
  double idle = 0;
  for (const DeviceTime& d : devices) idle += d.idle;
  return idle / (static_cast<double>(devices.size()) * step_time);
}

namespace {

using exec::BufferId;
using exec::Instruction;

constexpr double kUnknown = -1;  // a buffer not written yet (times are never negative)

// One device's stream: the positions of its instructions in the device's program, and how far it got.
struct Agent {
  int device = 0;
  Stream stream = Stream::compute;
  std::vector<std::uint32_t> positions;
  std::size_t pc = 0;
  double free = 0;       // when the stream can start its next instruction
  bool queued = false;   // in the worklist
  bool parked = false;   // arrived at a collective whose other members have not
};

struct PendingCollective {
  std::size_t arrived = 0;
  double start = 0;                 // the latest arrival so far
  std::int64_t bytes = 0;           // the largest member input so far
  std::vector<std::size_t> agents;  // the members that arrived (parked at it)
  std::vector<double> arrivals;     // aligned with agents
};

using P2pKey = std::tuple<int, int, std::int64_t>;  // sender, receiver, tag

class Simulator {
 public:
  Simulator(const exec::ExecPlan& exec, const Durations& durations)
      : exec_(exec), durations_(durations), ready_(exec.buffers.size(), kUnknown), waiters_(exec.buffers.size()) {
    for (int d = 0; d < exec.num_devices; ++d) {
      Agent compute{d, Stream::compute}, comm{d, Stream::communication};
      const auto& program = exec.programs[static_cast<std::size_t>(d)];
      for (std::uint32_t i = 0; i < program.size(); ++i) {
        const Instruction& instruction = program[i];
        if (const auto* load = std::get_if<exec::Load>(&instruction)) {
          if (load->output.index() < ready_.size()) ready_[load->output.index()] = 0;
        } else if (std::holds_alternative<exec::Compute>(instruction) || std::holds_alternative<exec::Local>(instruction)) {
          compute.positions.push_back(i);
        } else if (!std::holds_alternative<exec::Free>(instruction)) {
          comm.positions.push_back(i);
        }
      }
      agents_.push_back(std::move(compute));
      agents_.push_back(std::move(comm));
    }
  }

  Expected<SimResult> run() {
    for (std::size_t a = agents_.size(); a-- > 0;) wake(a);
    while (!worklist_.empty()) {
      const std::size_t a = worklist_.back();
      worklist_.pop_back();
      agents_[a].queued = false;
      LOOM_RETURN_IF_ERROR(advance(a));
    }
    LOOM_RETURN_IF_ERROR(check_finished());
    return result();
  }

 private:
  const Instruction& at(const Agent& agent) const {
    return exec_.programs[static_cast<std::size_t>(agent.device)][agent.positions[agent.pc]];
  }

  void wake(std::size_t a) {
    if (agents_[a].queued) return;
    agents_[a].queued = true;
    worklist_.push_back(a);
  }

  // The time `buffer` is ready, or kUnknown after registering `a` to be woken when it is written.
  double ready_or_wait(BufferId buffer, std::size_t a) {
    if (buffer == exec::kNoBuffer || buffer.index() >= ready_.size()) return 0;
    const double t = ready_[buffer.index()];
    if (t == kUnknown) waiters_[buffer.index()].push_back(a);
    return t;
  }

  void write(BufferId buffer, double time) {
    if (buffer == exec::kNoBuffer || buffer.index() >= ready_.size()) return;
    ready_[buffer.index()] = time;
    for (std::size_t a : waiters_[buffer.index()]) wake(a);
    waiters_[buffer.index()].clear();
  }

  Expected<double> checked(double duration, const Agent& agent) const {
    if (std::isfinite(duration) && duration >= 0) return duration;
    return fail(fmt::format("a duration of {} for device {}'s instruction {} ({})", duration, agent.device,
                            agent.positions[agent.pc], exec::instruction_to_text(exec_, at(agent))),
                "durations must be finite and not negative");
  }

  void record(const Agent& agent, EventKind kind, std::string name, double start, double end) {
    events_.push_back(Event{agent.device, agent.stream, kind, std::move(name), start, end,
                            static_cast<int>(agent.positions[agent.pc])});
  }

  std::string sub_op_name(plan::SubOpId id) const {
    if (exec_.plan != nullptr && id.index() < exec_.plan->sub_ops.size()) return exec_.plan->sub_op(id).name;
    return fmt::format("sub-op #{}", id.index());
  }

  // Runs agent a's instructions until one must wait.
  Expected<void> advance(std::size_t a) {
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
        if (!durations_.compute) return fail("the plan has computes but Durations::compute is not set");
        if (exec_.plan == nullptr || c->sub_op.index() >= exec_.plan->sub_ops.size())
          return fail(fmt::format("device {}'s instruction {} computes a sub-op the plan does not have", agent.device,
                                  agent.positions[agent.pc]),
                      "simulate an ExecPlan whose plan pointer is set (materialize sets it)");
        LOOM_ASSIGN_OR_RETURN(const double duration,
                              checked(durations_.compute(exec_.plan->sub_op(c->sub_op), agent.device), agent));
        finish(agent, EventKind::compute, sub_op_name(c->sub_op), start, start + duration, c->outputs);
      } else if (const auto* l = std::get_if<exec::Local>(&instruction)) {
        double start = agent.free;
        for (BufferId b : l->inputs) {
          const double t = ready_or_wait(b, a);
          if (t == kUnknown) return {};
          start = std::max(start, t);
        }
        double duration = 0;
        if (durations_.local) {
          const std::int64_t bytes = l->output.index() < exec_.buffers.size() ? exec_.buffer(l->output).bytes : 0;
          LOOM_ASSIGN_OR_RETURN(duration, checked(durations_.local(*l, bytes), agent));
        }
        finish(agent, EventKind::local, std::string(exec::name(l->kind)), start, start + duration, {l->output});
      } else if (const auto* c = std::get_if<exec::Collective>(&instruction)) {
        const double input = ready_or_wait(c->input, a);
        if (input == kUnknown) return {};
        return arrive(a, *c, std::max(agent.free, input));  // parked: the last member releases everyone
      } else if (const auto* s = std::get_if<exec::Send>(&instruction)) {
        const double input = ready_or_wait(s->buffer, a);
        if (input == kUnknown) return {};
        const double issue = std::max(agent.free, input);
        if (!durations_.p2p) return fail("the plan has sends but Durations::p2p is not set");
        const std::int64_t bytes = s->buffer.index() < exec_.buffers.size() ? exec_.buffer(s->buffer).bytes : 0;
        LOOM_ASSIGN_OR_RETURN(const double duration, checked(durations_.p2p(agent.device, s->peer, bytes), agent));
        const P2pKey key{agent.device, s->peer, s->tag};
        sends_[key] = issue;
        if (auto it = recv_waiters_.find(key); it != recv_waiters_.end()) {
          wake(it->second);
          recv_waiters_.erase(it);
        }
        finish(agent, EventKind::send, fmt::format("send -> {} #{}", s->peer, s->tag), issue, issue + duration, {});
      } else {
        const auto& r = std::get<exec::Recv>(instruction);
        const P2pKey key{r.peer, agent.device, r.tag};
        const auto sent = sends_.find(key);
        if (sent == sends_.end()) {
          recv_waiters_[key] = a;
          return {};
        }
        if (!durations_.p2p) return fail("the plan has recvs but Durations::p2p is not set");
        const std::int64_t bytes = r.buffer.index() < exec_.buffers.size() ? exec_.buffer(r.buffer).bytes : 0;
        LOOM_ASSIGN_OR_RETURN(const double duration, checked(durations_.p2p(r.peer, agent.device, bytes), agent));
        const double start = std::max(agent.free, sent->second);
        finish(agent, EventKind::recv, fmt::format("recv <- {} #{}", r.peer, r.tag), start, start + duration, {r.buffer});
      }
    }
    return {};
  }

  // Records the instruction at agent's pc as run over [start, end], writes its outputs, moves on.
  void finish(Agent& agent, EventKind kind, std::string name, double start, double end, const std::vector<BufferId>& outputs) {
    if (kind != EventKind::local || end > start) record(agent, kind, std::move(name), start, end);
    agent.free = end;
    ++agent.pc;
    for (BufferId b : outputs) write(b, end);
  }

  Expected<void> arrive(std::size_t a, const exec::Collective& c, double arrival) {
    PendingCollective& pending = collectives_[c.tag];
    const std::int64_t bytes = c.input.index() < exec_.buffers.size() ? exec_.buffer(c.input).bytes : 0;
    ++pending.arrived;
    pending.start = std::max(pending.start, arrival);
    pending.bytes = std::max(pending.bytes, bytes);
    pending.agents.push_back(a);
    pending.arrivals.push_back(arrival);
    if (pending.arrived < c.group.size()) {
      agents_[a].parked = true;
      return {};
    }
    if (!durations_.collective) return fail("the plan has collectives but Durations::collective is not set");
    LOOM_ASSIGN_OR_RETURN(const double duration, checked(durations_.collective(c, pending.bytes), agents_[a]));
    const double start = pending.start, end = start + duration;
    const std::string label = exec::collective_label(exec_, c);
    PendingCollective done = std::move(pending);
    collectives_.erase(c.tag);
    for (std::size_t m : done.agents) {
      Agent& member = agents_[m];
      const auto& mine = std::get<exec::Collective>(at(member));
      finish(member, EventKind::collective, label, start, end, {mine.output});
      member.parked = false;
      wake(m);  // the last to arrive too: it goes on from the worklist
    }
    return {};
  }

  Expected<void> check_finished() const {
    std::vector<std::string> stuck;
    for (const Agent& agent : agents_) {
      if (agent.pc >= agent.positions.size()) continue;
      stuck.push_back(fmt::format("device {} ({} stream) at instruction {}: {}", agent.device, name(agent.stream),
                                  agent.positions[agent.pc], exec::instruction_to_text(exec_, at(agent))));
    }
    if (stuck.empty()) return {};
    std::string message = "deadlock: ";
    for (std::size_t i = 0; i < stuck.size() && i < 8; ++i) message += (i ? "; " : "") + stuck[i];
    if (stuck.size() > 8) message += fmt::format("; and {} more streams", stuck.size() - 8);
    return fail(std::move(message), "check the plan with check_exec_plan; materialized plans cannot hang");
  }

  SimResult result() {
    SimResult out;
    std::ranges::sort(events_, [](const Event& x, const Event& y) {
      return std::tie(x.device, x.stream, x.start, x.instruction) < std::tie(y.device, y.stream, y.start, y.instruction);
    });
    for (const Event& e : events_) out.step_time = std::max(out.step_time, e.end);
    out.devices.resize(static_cast<std::size_t>(exec_.num_devices));
    // Per device, the two streams' intervals are each disjoint and sorted: sum them and their overlap.
    std::size_t i = 0;
    for (int d = 0; d < exec_.num_devices; ++d) {
      std::vector<std::pair<double, double>> compute, comm;
      for (; i < events_.size() && events_[i].device == d; ++i)
        (events_[i].stream == Stream::compute ? compute : comm).emplace_back(events_[i].start, events_[i].end);
      DeviceTime& t = out.devices[static_cast<std::size_t>(d)];
      for (const auto& [s, e] : compute) t.compute += e - s;
      for (const auto& [s, e] : comm) t.communication += e - s;
      double overlap = 0;
      for (std::size_t x = 0, y = 0; x < compute.size() && y < comm.size();) {
        overlap += std::max(0.0, std::min(compute[x].second, comm[y].second) - std::max(compute[x].first, comm[y].first));
        if (compute[x].second < comm[y].second) ++x; else ++y;
      }
      t.exposed_communication = t.communication - overlap;
      t.idle = std::max(0.0, out.step_time - t.compute - t.exposed_communication);
    }
    out.events = std::move(events_);
    return out;
  }

  const exec::ExecPlan& exec_;
  const Durations& durations_;
  std::vector<double> ready_;                    // by buffer
  std::vector<std::vector<std::size_t>> waiters_;  // by buffer: agents waiting for it to be written
  std::vector<Agent> agents_;                    // device d's compute stream is 2d, its communication 2d + 1
  std::vector<std::size_t> worklist_;
  std::unordered_map<std::int64_t, PendingCollective> collectives_;  // by tag, while members arrive
  std::map<P2pKey, double> sends_;               // issue times
  std::map<P2pKey, std::size_t> recv_waiters_;
  std::vector<Event> events_;
};

}  // namespace

Expected<SimResult> simulate(const exec::ExecPlan& exec, const Durations& durations) {
  if (exec.programs.size() != static_cast<std::size_t>(exec.num_devices))
    return fail(fmt::format("the ExecPlan has {} programs for {} devices", exec.programs.size(), exec.num_devices),
                "give every device a program");
  return Simulator(exec, durations).run();
}

}  // namespace loom::sim
