#include "loom/sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <unordered_map>

#include "loom/exec/exec_text.h"
#include "loom/sim/comm_index.h"
#include "loom/sim/symmetry.h"

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

constexpr double kUnknown = -1;  // a time not known yet (times are never negative)

// One simulated device's stream: the positions of its instructions in the device's program, and how far
// it got.
struct Agent {
  int device = 0;
  std::size_t slot = 0;  // the device's index among the simulated ones
  Stream stream = Stream::compute;
  std::vector<std::uint32_t> positions;
  std::size_t pc = 0;
  double free = 0;       // when the stream can start its next instruction
  bool queued = false;   // in the worklist
  bool parked = false;   // arrived at a collective that has not started yet
};

// A simulated device: when its communication stream reached each position (a collective's arrival, a
// send's issue), which other devices' collectives and recvs read, and its compute stream's busy times,
// which contention reads.
struct Slot {
  int device = 0;
  std::vector<double> reached;                    // by program position; kUnknown until reached
  std::vector<std::pair<double, double>> busy;    // compute intervals, in order
};

// Something waiting for a position of a simulated device to be reached.
struct Waiter {
  bool collective = false;  // a pending collective (id: its tag), else a recv's agent (id: the agent)
  std::int64_t id = 0;
};

// A collective some simulated member has reached: it starts when every member has arrived, each
// member's arrival read at the position its class representative (or itself) reaches.
struct PendingCollective {
  std::size_t missing = 0;            // arrivals not known yet
  double start = 0;                   // the latest known arrival
  std::int64_t bytes = 0;             // the largest member input
  std::vector<std::size_t> parked;    // the simulated agents waiting in it
  std::vector<std::size_t> slots;     // the slots whose arrivals it reads (contention stretches on them)
};

std::uint64_t key(std::size_t slot, std::uint32_t position) { return (std::uint64_t{slot} << 32) | position; }

class Simulator {
 public:
  // represented_by[d]: the simulated device whose times device d has; the simulated devices are those
  // representing themselves.
  Simulator(const exec::ExecPlan& exec, const Durations& durations, const CommIndex& index, std::vector<int> represented_by)
      : exec_(exec), durations_(durations), index_(index), represented_by_(std::move(represented_by)),
        slot_of_(static_cast<std::size_t>(exec.num_devices), -1), ready_(exec.buffers.size(), kUnknown),
        waiters_(exec.buffers.size()) {
    for (int d = 0; d < exec.num_devices; ++d) {
      if (represented_by_[static_cast<std::size_t>(d)] != d) continue;
      const std::size_t slot = slots_.size();
      slot_of_[static_cast<std::size_t>(d)] = static_cast<int>(slot);
      const auto& program = exec.programs[static_cast<std::size_t>(d)];
      slots_.push_back(Slot{d, std::vector<double>(program.size(), kUnknown), {}});
      Agent compute{d, slot, Stream::compute}, comm{d, slot, Stream::communication};
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

  Expected<void> run() {
    for (std::size_t a = agents_.size(); a-- > 0;) wake(a);
    while (!worklist_.empty()) {
      const std::size_t a = worklist_.back();
      worklist_.pop_back();
      agents_[a].queued = false;
      LOOM_RETURN_IF_ERROR(advance(a));
    }
    return check_finished();
  }

  // The check on the times (symmetry.h), after run(): every device not simulated would see, at each
  // collective and recv, exactly what its representative saw. Empty when so; else the first difference.
  Expected<std::string> check_represented() {
    for (int d = 0; d < exec_.num_devices; ++d) {
      const int r = represented_by_[static_cast<std::size_t>(d)];
      if (r == d) continue;
      const auto& mine = exec_.programs[static_cast<std::size_t>(d)];
      const auto& theirs = exec_.programs[static_cast<std::size_t>(r)];
      for (std::uint32_t i = 0; i < mine.size() && i < theirs.size(); ++i) {
        std::string why;
        if (const auto* a = std::get_if<exec::Recv>(&mine[i]); a != nullptr) {
          const auto* b = std::get_if<exec::Recv>(&theirs[i]);
          const double seen = b != nullptr ? issue_seen(*a, d) : kUnknown;
          const double theirs_seen = b != nullptr ? issue_seen(*b, r) : kUnknown;
          if (seen == kUnknown || seen != theirs_seen)
            why = fmt::format("its sender issues at {} s, the representative's at {} s", seen, theirs_seen);
        } else if (const auto* a = std::get_if<exec::Collective>(&mine[i]); a != nullptr) {
          const auto* b = std::get_if<exec::Collective>(&theirs[i]);
          if (b == nullptr) {
            why = "the representative has no collective there";
          } else {
            LOOM_ASSIGN_OR_RETURN(const auto my_span, span(*a));
            LOOM_ASSIGN_OR_RETURN(const auto their_span, span(*b));
            if (my_span != their_span)
              why = fmt::format("it runs over [{}, {}] s, the representative's over [{}, {}] s", my_span.first,
                                my_span.second, their_span.first, their_span.second);
          }
        }
        if (!why.empty())
          return fmt::format("device {}'s instruction {} ({}) waits differently from its class representative {}'s: {}",
                             d, i, exec::instruction_to_text(exec_, mine[i]), r, why);
      }
    }
    return std::string();
  }

  // After run(): the events and each device's times.
  SimResult result() {
    SimResult out;
    std::ranges::sort(events_, [](const Event& x, const Event& y) {
      return std::tie(x.device, x.stream, x.start, x.instruction) < std::tie(y.device, y.stream, y.start, y.instruction);
    });
    for (const Event& e : events_) out.step_time = std::max(out.step_time, e.end);
    out.devices.resize(static_cast<std::size_t>(exec_.num_devices));
    // Per device, the two streams' intervals are each disjoint and sorted: sum them and their overlap.
    std::size_t i = 0;
    for (const Slot& slot : slots_) {
      const int d = slot.device;
      out.simulated_devices.push_back(d);
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
    for (int d = 0; d < exec_.num_devices; ++d) {
      const int r = represented_by_[static_cast<std::size_t>(d)];
      if (r != d) out.devices[static_cast<std::size_t>(d)] = out.devices[static_cast<std::size_t>(r)];
    }
    out.represented_by = std::move(represented_by_);
    out.events = std::move(events_);
    return out;
  }

 private:
  const Instruction& at(const Agent& agent) const {
    return exec_.programs[static_cast<std::size_t>(agent.device)][agent.positions[agent.pc]];
  }
  std::uint32_t position(const Agent& agent) const { return agent.positions[agent.pc]; }
  std::int64_t bytes(BufferId b) const { return b.index() < exec_.buffers.size() ? exec_.buffer(b).bytes : 0; }
  // The slot holding device d's times (its representative's).
  std::size_t slot_for(int device) const {
    return static_cast<std::size_t>(slot_of_[static_cast<std::size_t>(represented_by_[static_cast<std::size_t>(device)])]);
  }
  bool is_device(int device) const { return device >= 0 && device < exec_.num_devices; }

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
                            position(agent), exec::instruction_to_text(exec_, at(agent))),
                "durations must be finite and not negative");
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
                                  position(agent)),
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
          LOOM_ASSIGN_OR_RETURN(duration, checked(durations_.local(*l, bytes(l->output)), agent));
        }
        finish(agent, EventKind::local, std::string(exec::name(l->kind)), start, start + duration, {l->output});
      } else if (const auto* c = std::get_if<exec::Collective>(&instruction)) {
        const double input = ready_or_wait(c->input, a);
        if (input == kUnknown) return {};
        return arrive(a, *c, std::max(agent.free, input));  // parked: the last arrival releases the members
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
        finish(agent, EventKind::recv, fmt::format("recv <- {} #{}", r.peer, r.tag), start, end, {r.buffer});
      }
    }
    return {};
  }

  // Records the instruction at agent's pc as run over [start, end], writes its outputs, moves on.
  void finish(Agent& agent, EventKind kind, std::string name, double start, double end, const std::vector<BufferId>& outputs) {
    if (kind != EventKind::local || end > start)
      events_.push_back(Event{agent.device, agent.stream, kind, std::move(name), start, end, static_cast<int>(position(agent))});
    if (agent.stream == Stream::compute && end > start) slots_[agent.slot].busy.emplace_back(start, end);
    agent.free = end;
    ++agent.pc;
    for (BufferId b : outputs) write(b, end);
  }

  double reached(std::size_t slot, std::uint32_t position) const {
    const auto& times = slots_[slot].reached;
    return position < times.size() ? times[position] : kUnknown;
  }

  // The communication stream of `slot` reached `position` at `time`: wakes what waits for it.
  Expected<void> reach(std::size_t slot, std::uint32_t position, double time) {
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

  Expected<void> arrive(std::size_t a, const exec::Collective& c, double arrival) {
    auto it = pending_.find(c.tag);
    if (it == pending_.end()) {
      LOOM_ASSIGN_OR_RETURN(it, open(c));
    }
    it->second.parked.push_back(a);
    agents_[a].parked = true;
    return reach(agents_[a].slot, position(agents_[a]), arrival);  // releases it when a is the last
  }

  // Starts waiting for the members of collective c, which a simulated member has just reached.
  Expected<std::unordered_map<std::int64_t, PendingCollective>::iterator> open(const exec::Collective& c) {
    LOOM_ASSIGN_OR_RETURN(const Members m, members(c));
    PendingCollective pending;
    pending.bytes = m.bytes;
    pending.slots = slots_of(m.keys);
    for (std::uint64_t k : m.keys) {
      const double t = reached(static_cast<std::size_t>(k >> 32), static_cast<std::uint32_t>(k));
      if (t == kUnknown) {
        ++pending.missing;
        waiters_at_[k].push_back(Waiter{true, c.tag});
      } else {
        pending.start = std::max(pending.start, t);
      }
    }
    return pending_.emplace(c.tag, std::move(pending)).first;
  }

  // Every member has arrived: the collective runs on all of them at once.
  Expected<void> release(std::int64_t tag) {
    const auto it = pending_.find(tag);
    PendingCollective done = std::move(it->second);
    pending_.erase(it);
    const Agent& first = agents_[done.parked.front()];
    const auto& c = std::get<exec::Collective>(at(first));
    if (!durations_.collective) return fail("the plan has collectives but Durations::collective is not set");
    LOOM_ASSIGN_OR_RETURN(const double duration, checked(durations_.collective(c, done.bytes), first));
    LOOM_ASSIGN_OR_RETURN(const double end, collective_end(done.start, duration, done.slots));
    const std::string label = exec::collective_label(exec_, c);
    for (std::size_t m : done.parked) {
      Agent& member = agents_[m];
      const auto& mine = std::get<exec::Collective>(at(member));
      finish(member, EventKind::collective, label, done.start, end, {mine.output});
      member.parked = false;
      wake(m);  // the last to arrive too: it goes on from the worklist
    }
    return {};
  }

  // A collective's end: its start plus its duration, or under contention its slowest member's end.
  Expected<double> collective_end(double start, double duration, const std::vector<std::size_t>& slots) {
    double end = start + duration;
    for (std::size_t slot : slots) {
      LOOM_ASSIGN_OR_RETURN(const double member_end, stretched(slot, start, duration));
      end = std::max(end, member_end);
    }
    return end;
  }

  // Where collective c's members sit and what they move: their slots' positions (distinct, sorted) and
  // the largest input. Errors: a group whose programs do not all run it, a member whose representative
  // has no collective at its position.
  struct Members {
    std::vector<std::uint64_t> keys;
    std::int64_t bytes = 0;
  };
  Expected<Members> members(const exec::Collective& c) const {
    const std::span<const Site> sites = index_.collective(c.tag);
    if (exec_.partial) return partial_members(c, sites);
    if (sites.size() != c.group.size())
      return fail(fmt::format("collective #{} ({}) has a group of {} devices but {} programs run it", c.tag,
                              exec::collective_label(exec_, c), c.group.size(), sites.size()),
                  "check the plan with check_exec_plan");
    Members out;
    out.keys.reserve(sites.size());
    for (const Site& site : sites) {
      const std::size_t slot = slot_for(site.device);
      const auto& program = exec_.programs[static_cast<std::size_t>(slots_[slot].device)];
      if (site.instruction >= program.size() || !std::holds_alternative<exec::Collective>(program[site.instruction]))
        return fail(fmt::format("device {}'s collective #{} sits at instruction {}, where its representative {} has none",
                                site.device, c.tag, site.instruction, slots_[slot].device),
                    "the device classes are not a symmetry; simulate with use_device_classes = false");
      const auto& member = std::get<exec::Collective>(exec_.programs[static_cast<std::size_t>(site.device)][site.instruction]);
      out.bytes = std::max(out.bytes, bytes(member.input));
      out.keys.push_back(key(slot, site.instruction));
    }
    std::ranges::sort(out.keys);
    out.keys.erase(std::unique(out.keys.begin(), out.keys.end()), out.keys.end());
    return out;
  }

  // In a partial plan only representatives run collectives: every member arrives when its
  // representative reaches the collective, which the representative must run.
  Expected<Members> partial_members(const exec::Collective& c, std::span<const Site> sites) const {
    Members out;
    for (const Site& site : sites) {
      const auto& member = std::get<exec::Collective>(exec_.programs[static_cast<std::size_t>(site.device)][site.instruction]);
      out.bytes = std::max(out.bytes, bytes(member.input));
      if (represented_by_[static_cast<std::size_t>(site.device)] == site.device)
        out.keys.push_back(key(slot_for(site.device), site.instruction));
    }
    for (int g : c.group) {
      const bool runs = is_device(g) && std::ranges::any_of(sites, [&](const Site& site) {
        return site.device == represented_by_[static_cast<std::size_t>(g)];
      });
      if (!runs)
        return fail(fmt::format("collective #{} ({}): member {}'s representative does not run it", c.tag,
                                exec::collective_label(exec_, c), g),
                    "a partial (folded) plan needs every collective run by its members' representatives");
    }
    std::ranges::sort(out.keys);
    return out;
  }

  static std::vector<std::size_t> slots_of(const std::vector<std::uint64_t>& keys) {
    std::vector<std::size_t> slots;
    for (std::uint64_t k : keys)
      if (slots.empty() || slots.back() != static_cast<std::size_t>(k >> 32)) slots.push_back(static_cast<std::size_t>(k >> 32));
    return slots;
  }

  // After run(): when collective c runs, from its members' arrivals as their representatives reached
  // them; once per tag.
  Expected<std::pair<double, double>> span(const exec::Collective& c) {
    if (const auto it = spans_.find(c.tag); it != spans_.end()) return it->second;
    LOOM_ASSIGN_OR_RETURN(const Members m, members(c));
    double start = 0;
    for (std::uint64_t k : m.keys) start = std::max(start, reached(static_cast<std::size_t>(k >> 32), static_cast<std::uint32_t>(k)));
    if (!durations_.collective) return fail("the plan has collectives but Durations::collective is not set");
    const double duration = durations_.collective(c, m.bytes);
    LOOM_ASSIGN_OR_RETURN(const double end, collective_end(start, duration, slots_of(m.keys)));
    return spans_[c.tag] = {start, end};
  }

  // After run(): when the sender of device d's recv r issues, read from the sender's representative.
  double issue_seen(const exec::Recv& r, int d) const {
    if (!is_device(r.peer)) return kUnknown;
    const std::optional<std::uint32_t> sent = index_.send(r.peer, d, r.tag);
    return sent ? reached(slot_for(r.peer), *sent) : kUnknown;
  }

  // When communication of `duration` started at `start` on `slot` ends, progressing at 1/contention of
  // its speed while the slot's compute stream is busy. The compute stream is first run as far as it can
  // go: it then waits for this communication or a later one on its device, so it stays idle past its
  // last recorded interval until this one ends.
  Expected<double> stretched(std::size_t slot, double start, double duration) {
    const double factor = durations_.contention;
    if (factor == 1 || duration == 0) return start + duration;
    Agent& compute = agents_[2 * slot];
    if (compute.queued) LOOM_RETURN_IF_ERROR(advance(2 * slot));
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

  Expected<void> check_finished() const {
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

  const exec::ExecPlan& exec_;
  const Durations& durations_;
  const CommIndex& index_;
  std::vector<int> represented_by_;                 // by device
  std::vector<int> slot_of_;                        // by device: its slot, -1 when not simulated
  std::vector<Slot> slots_;
  std::vector<Agent> agents_;                       // slot s's compute stream is 2s, its communication 2s + 1
  std::vector<double> ready_;                       // by buffer
  std::vector<std::vector<std::size_t>> waiters_;   // by buffer: agents waiting for it to be written
  std::unordered_map<std::uint64_t, std::vector<Waiter>> waiters_at_;  // by key(slot, position)
  std::unordered_map<std::int64_t, PendingCollective> pending_;       // by tag
  std::unordered_map<std::int64_t, std::pair<double, double>> spans_;  // by tag, for check_represented
  std::vector<std::size_t> worklist_;
  std::vector<Event> events_;
};

}  // namespace

Expected<SimResult> simulate(const exec::ExecPlan& exec, const Durations& durations, SimOptions options) {
  if (exec.programs.size() != static_cast<std::size_t>(exec.num_devices))
    return fail(fmt::format("the ExecPlan has {} programs for {} devices", exec.programs.size(), exec.num_devices),
                "give every device a program");
  if (!(durations.contention >= 1) || !std::isfinite(durations.contention))
    return fail(fmt::format("a contention of {}", durations.contention),
                "contention is the slowdown of communication under compute: 1 (none) or more");
  LOOM_ASSIGN_OR_RETURN(const CommIndex index, CommIndex::build(exec));
  std::vector<int> every_device(static_cast<std::size_t>(exec.num_devices));
  std::iota(every_device.begin(), every_device.end(), 0);
  std::string fallback;
  if (exec.partial) {
    // Symmetric by construction (exec/fold.h): the representatives are all there is to simulate.
    if (exec.class_of.size() != every_device.size())
      return fail("a partial ExecPlan without device classes", "unfold it with exec::unfold_step");
    std::vector<int> represented_by(every_device.size());
    for (std::size_t d = 0; d < represented_by.size(); ++d)
      represented_by[d] = exec.representatives[static_cast<std::size_t>(exec.class_of[d])];
    Simulator by_class(exec, durations, index, std::move(represented_by));
    LOOM_RETURN_IF_ERROR(by_class.run());
    return by_class.result();
  }
  if (options.use_device_classes && !exec.class_of.empty()) {
    // Structure first, then the representatives' times (symmetry.h); any failure, an error included,
    // leaves the answer to the full simulation.
    fallback = symmetry_violation(exec, index, durations);
    if (fallback.empty()) {
      std::vector<int> represented_by(every_device.size());
      for (std::size_t d = 0; d < represented_by.size(); ++d)
        represented_by[d] = exec.representatives[static_cast<std::size_t>(exec.class_of[d])];
      Simulator by_class(exec, durations, index, std::move(represented_by));
      const Expected<void> ran = by_class.run();
      const Expected<std::string> mismatch = ran ? by_class.check_represented() : std::unexpected(ran.error());
      if (mismatch && mismatch->empty()) return by_class.result();
      fallback = mismatch ? *mismatch : "simulating one device per class failed: " + mismatch.error().message;
    }
  }
  Simulator full(exec, durations, index, std::move(every_device));
  LOOM_RETURN_IF_ERROR(full.run());
  SimResult result = full.result();
  result.symmetry_fallback = std::move(fallback);
  return result;
}

}  // namespace loom::sim
