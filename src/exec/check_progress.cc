// The progress half of check_exec_plan (check.h): runs the programs abstractly. Every instruction but a
// recv, a collective or a wait completes at once (sends are buffered, a start only joins its
// collective); a recv waits for its send, a collective for all its members, a wait for every member's
// start of its tag and, for a chained start (exec_plan.h), for the starts writing its inputs to complete
// (a start completes once every member has run it and its own input starts have completed). A worklist of runnable devices visits each instruction once and each collective
// member (or waiting device) once more when the collective completes, so the cost is linear in the
// instruction count.
#include <algorithm>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "check_internal.h"
#include "loom/exec/exec_text.h"

namespace loom::exec::detail {
namespace {

class Simulation {
 public:
  Simulation(const ExecPlan& exec, const Links& links)
      : exec_(exec), links_(links), pc_(static_cast<std::size_t>(exec.num_devices), 0),
        blocked_(static_cast<std::size_t>(exec.num_devices), false), arrived_(links.slots, 0), waiting_(links.slots),
        inputs_of_(links.slots), readers_of_(links.slots), open_inputs_(links.slots, 0), complete_(links.slots, false) {
    link_chained_starts();
  }

  void run() {
    std::vector<int> runnable;
    for (int d = exec_.num_devices - 1; d >= 0; --d) runnable.push_back(d);
    while (!runnable.empty()) {
      const int d = runnable.back();
      runnable.pop_back();
      advance(d, runnable);
    }
  }

  // After run(): the first device that did not finish, or -1.
  int first_stuck() const {
    for (int d = 0; d < exec_.num_devices; ++d)
      if (pc_[static_cast<std::size_t>(d)] < program(d).size()) return d;
    return -1;
  }

  // A stuck device waits for another stuck one: a recv's sender has not reached the send (else the
  // recv would have completed), a collective's missing member has not reached it. Structure guarantees
  // both exist in those programs, so they are stuck too, and following the waits must close a cycle.
  struct Wait {
    int on = -1;
    std::string clause;  // "waits at instruction 3 in all-reduce #5 (group 0,1) for device 1"
    bool recv = false;   // waits for a send (else for a collective's member)
  };
  Wait wait_of(int d) const {
    const std::uint32_t at = pc_[static_cast<std::size_t>(d)];
    const Instruction& instruction = program(d)[at];
    if (const auto* r = std::get_if<Recv>(&instruction))
      return {r->peer, fmt::format("waits at instruction {} for a send from device {} (tag {})", at, r->peer, r->tag), true};
    const std::uint32_t slot = links_.link[links_.global(d, at)];
    if (std::holds_alternative<CollectiveWait>(instruction)) {
      // A member that has not run its start yet, of this start or of one it reads (it exists: the wait
      // would have passed).
      const auto [m, tag] = unstarted_member(slot);
      if (m < 0) return {};
      return {m, fmt::format("waits at instruction {} for device {} to start #{}", at, m, tag), false};
    }
    const auto& c = std::get<Collective>(instruction);
    for (int m : c.group)
      if (!waits_in(m, slot))
        return {m, fmt::format("waits at instruction {} in {} for device {}", at, collective_label(exec_, c), m), false};
    return {};  // unreachable for a structurally valid plan: the collective would have completed
  }

 private:
  const std::vector<Instruction>& program(int d) const { return exec_.programs[static_cast<std::size_t>(d)]; }

  bool waits_in(int m, std::uint32_t slot) const {
    const std::uint32_t at = pc_[static_cast<std::size_t>(m)];
    return at < program(m).size() && std::holds_alternative<Collective>(program(m)[at]) &&
           links_.link[links_.global(m, at)] == slot;
  }

  void advance(int d, std::vector<int>& runnable) {
    const auto& prog = program(d);
    std::uint32_t& pc = pc_[static_cast<std::size_t>(d)];
    blocked_[static_cast<std::size_t>(d)] = false;
    for (; pc < prog.size(); ++pc) {
      const std::uint32_t partner = links_.link[links_.global(d, pc)];
      if (const auto* r = std::get_if<Recv>(&prog[pc])) {
        // The send has run when its device's program counter is past it.
        if (pc_[static_cast<std::size_t>(r->peer)] <= partner - offset(r->peer)) {
          blocked_[static_cast<std::size_t>(d)] = true;
          return;
        }
      } else if (const auto* s = std::get_if<Send>(&prog[pc])) {
        const std::size_t to = static_cast<std::size_t>(s->peer);
        if (blocked_[to] && pc_[to] == partner - offset(s->peer)) {
          blocked_[to] = false;  // re-runs its recv, which now finds the send done (pc moves on below)
          runnable.push_back(s->peer);
        }
      } else if (const auto* start = std::get_if<CollectiveStart>(&prog[pc])) {
        if (++arrived_[partner] == start->group.size()) complete_if_ready(partner, runnable);
      } else if (std::holds_alternative<CollectiveWait>(prog[pc])) {
        if (!complete_[partner]) {
          blocked_[static_cast<std::size_t>(d)] = true;
          waiting_[partner].push_back(d);
          return;
        }
      } else if (const auto* c = std::get_if<Collective>(&prog[pc])) {
        if (++arrived_[partner] < c->group.size()) {
          blocked_[static_cast<std::size_t>(d)] = true;
          return;
        }
        // The last member to arrive releases the others past the collective.
        for (int m : c->group)
          if (m != d) {
            ++pc_[static_cast<std::size_t>(m)];
            blocked_[static_cast<std::size_t>(m)] = false;
            runnable.push_back(m);
          }
      }
    }
  }
  std::uint32_t offset(int d) const { return links_.offsets[static_cast<std::size_t>(d)]; }
  std::uint32_t member_count(std::uint32_t slot) const { return links_.member_offsets[slot + 1] - links_.member_offsets[slot]; }

  // Each start's slot the slots of the starts whose outputs its members read (a chained start's inputs).
  void link_chained_starts() {
    std::unordered_map<std::uint32_t, std::uint32_t> written_by;  // buffer -> the slot of the start writing it
    for (int d = 0; d < exec_.num_devices; ++d) {
      const auto& prog = program(d);
      for (std::uint32_t i = 0; i < prog.size(); ++i) {
        const auto* start = std::get_if<CollectiveStart>(&prog[i]);
        if (start == nullptr) continue;
        const std::uint32_t slot = links_.link[links_.global(d, i)];
        for (BufferId in : start->inputs)
          if (const auto it = written_by.find(in.value); it != written_by.end() && !contains(inputs_of_[slot], it->second)) {
            inputs_of_[slot].push_back(it->second);
            readers_of_[it->second].push_back(slot);
            ++open_inputs_[slot];
          }
        for (BufferId out : start->outputs) written_by[out.value] = slot;
      }
    }
  }
  static bool contains(const std::vector<std::uint32_t>& v, std::uint32_t x) { return std::ranges::find(v, x) != v.end(); }

  // A start whose members have all run it and whose input starts have completed completes: the devices
  // waiting for it go on, and so may the chained starts reading its outputs.
  void complete_if_ready(std::uint32_t slot, std::vector<int>& runnable) {
    std::vector<std::uint32_t> ready{slot};
    while (!ready.empty()) {
      const std::uint32_t s = ready.back();
      ready.pop_back();
      if (complete_[s] || arrived_[s] < member_count(s) || open_inputs_[s] > 0) continue;
      complete_[s] = true;
      for (int w : waiting_[s]) {
        blocked_[static_cast<std::size_t>(w)] = false;
        runnable.push_back(w);
      }
      waiting_[s].clear();
      for (std::uint32_t reader : readers_of_[s]) {
        --open_inputs_[reader];
        ready.push_back(reader);
      }
    }
  }

  // A member (device, tag) that has not run its start of `slot`, or of a start it reads that has not
  // completed; {-1, 0} when none.
  std::pair<int, std::int64_t> unstarted_member(std::uint32_t slot) const {
    for (std::uint32_t k = links_.member_offsets[slot]; k < links_.member_offsets[slot + 1]; ++k) {
      const std::uint32_t member = links_.members[k];
      const int m = links_.device_of(member);
      if (pc_[static_cast<std::size_t>(m)] <= links_.index_of(member)) return {m, links_.slot_tags[slot]};
    }
    for (std::uint32_t input : inputs_of_[slot])
      if (!complete_[input])
        if (const auto found = unstarted_member(input); found.first >= 0) return found;
    return {-1, 0};
  }

  const ExecPlan& exec_;
  const Links& links_;
  std::vector<std::uint32_t> pc_;  // by device: instructions before it have run
  std::vector<bool> blocked_;      // by device: waiting at pc (in a recv or a collective)
  std::vector<std::uint32_t> arrived_;  // by collective slot: members that reached it (or ran its start)
  std::vector<std::vector<int>> waiting_;  // by start's slot: devices blocked in a wait for it
  std::vector<std::vector<std::uint32_t>> inputs_of_, readers_of_;  // by start's slot: chained starts' links
  std::vector<std::uint32_t> open_inputs_;  // by start's slot: its input starts not yet complete
  std::vector<bool> complete_;             // by start's slot
};

}  // namespace

Expected<void> check_progress(const ExecPlan& exec, const Links& links) {
  Simulation simulation(exec, links);
  simulation.run();
  const int start = simulation.first_stuck();
  if (start < 0) return {};
  // Follow the waits from the first stuck device until a device repeats: that closes the cycle.
  std::vector<int> position(static_cast<std::size_t>(exec.num_devices), -1);
  std::vector<int> devices;
  std::vector<Simulation::Wait> waits;
  int d = start;
  for (; position[static_cast<std::size_t>(d)] < 0; d = waits.back().on) {
    position[static_cast<std::size_t>(d)] = static_cast<int>(devices.size());
    devices.push_back(d);
    waits.push_back(simulation.wait_of(d));
    if (waits.back().on < 0)  // cannot happen after check_structure: a complete collective would have run
      return fail(fmt::format("device {} is stuck in a collective that has all its members", d),
                  "this is a bug in check_exec_plan; please report the plan");
  }
  // "device a <wait>, which <wait>, ...": each clause ends naming the next device.
  auto chain = [&](std::size_t from, std::size_t to) {
    std::string text = fmt::format("device {} {}", devices[from], waits[from].clause);
    for (std::size_t i = from + 1; i < to; ++i) text += ", which " + waits[i].clause;
    return text;
  };
  const std::size_t entry = static_cast<std::size_t>(position[static_cast<std::size_t>(d)]);
  std::string message = "deadlock: " + chain(entry, devices.size());
  if (entry > 0)  // the first stuck device is not on the cycle, only waiting on it
    message += fmt::format("; {}{}", chain(0, entry), waits[entry - 1].recv ? " that never comes" : ", which never arrives");
  return fail(std::move(message),
              "collectives must run in one relative order on all their members, and no send may wait on its own "
              "recv: build each device's program as a subsequence of one global order, as materialize does");
}

}  // namespace loom::exec::detail
