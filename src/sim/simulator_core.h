// Private to simulate (simulator.h). One Simulator runs the programs of the simulated devices (every
// device, or one representative per class) as a worklist over their streams:
//   simulator_core.cc         the streams, the worklist, and each instruction's start and end;
//   simulator_collectives.cc  a collective's members, their arrivals and its release;
//   simulator_represented.cc  the check, after a run, that each represented device sees its
//                             representative's times (symmetry.h);
//   simulator_result.cc       the events and each device's times.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"
#include "loom/exec/instruction_buffers.h"
#include "loom/sim/comm_index.h"
#include "loom/sim/simulator.h"

namespace loom::sim::detail {

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
// send's issue), which other devices' collectives and recvs read; when its compute stream issued each
// collective or start (it cannot start before); its compute stream's busy times, which contention
// reads; and its starts' first outputs by tag, which its waits wait for.
struct Slot {
  int device = 0;
  std::vector<double> reached;                    // by program position; kUnknown until reached
  std::vector<double> issued;                     // by program position; kUnknown until issued
  std::vector<std::pair<double, double>> busy;    // compute intervals, in order
  std::unordered_map<std::int64_t, exec::BufferId> started;  // by tag
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

inline std::uint64_t key(std::size_t slot, std::uint32_t position) { return (std::uint64_t{slot} << 32) | position; }

class Simulator {
 public:
  // represented_by[d]: the simulated device whose times device d has; the simulated devices are those
  // representing themselves.
  // `folded`: only the representatives have programs (exec/fold.h), and collectives' members arrive when
  // their representatives do.
  Simulator(const exec::ExecPlan& exec, const Durations& durations, const CommIndex& index, std::vector<int> represented_by,
            bool folded = false);

  Expected<void> run();

  // The check on the times (symmetry.h), after run(): every device not simulated would see, at each
  // collective and recv, exactly what its representative saw. Empty when so; else the first difference.
  Expected<std::string> check_represented();

  // After run(): the events and each device's times.
  SimResult result();

 private:
  const exec::Instruction& at(const Agent& agent) const {
    return exec_.programs[static_cast<std::size_t>(agent.device)][agent.positions[agent.pc]];
  }
  std::uint32_t position(const Agent& agent) const { return agent.positions[agent.pc]; }
  std::int64_t bytes(exec::BufferId b) const { return b.index() < exec_.buffers.size() ? exec_.buffer(b).bytes : 0; }
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

  double reached(std::size_t slot, std::uint32_t position) const {
    const auto& times = slots_[slot].reached;
    return position < times.size() ? times[position] : kUnknown;
  }

  // simulator_core.cc: the streams.

  // The time `buffer` is ready, or kUnknown after registering `a` to be woken when it is written.
  double ready_or_wait(exec::BufferId buffer, std::size_t a);
  void write(exec::BufferId buffer, double time);
  Expected<double> checked(double duration, const Agent& agent) const;
  std::string sub_op_name(plan::SubOpId id) const;
  // Runs agent a's instructions until one must wait.
  Expected<void> advance(std::size_t a);
  // Records the instruction at agent's pc as run over [start, end], writes its outputs, moves on.
  void finish(Agent& agent, EventKind kind, std::string name, double start, double end,
              std::span<const exec::BufferId> outputs);
  // The compute stream at a collective or start: issues it (the communication stream may start it now).
  void issue_collective(const Agent& agent);
  // The compute stream at a blocking collective or a wait: moves on once `buffer` (an output) is ready.
  bool hold_until(std::size_t a, exec::BufferId buffer);
  // The communication stream of `slot` reached `position` at `time`: wakes what waits for it.
  Expected<void> reach(std::size_t slot, std::uint32_t position, double time);
  // When communication of `duration` started at `start` on `slot` ends, progressing at 1/contention of
  // its speed while the slot's compute stream is busy.
  Expected<double> stretched(std::size_t slot, double start, double duration);
  Expected<void> check_finished() const;

  // simulator_collectives.cc: collectives.

  // Where collective c's members sit and what they move: their slots' positions (distinct, sorted) and
  // the largest input.
  struct Members {
    std::vector<std::uint64_t> keys;
    std::int64_t bytes = 0;
  };
  Expected<void> arrive(std::size_t a, const exec::CollectiveCall& c, double arrival);
  // Starts waiting for the members of collective c, which a simulated member has just reached.
  Expected<std::unordered_map<std::int64_t, PendingCollective>::iterator> open(const exec::CollectiveCall& c);
  // Every member has arrived: the collective runs on all of them at once.
  Expected<void> release(std::int64_t tag);
  // A collective's end: its start plus its duration, or under contention its slowest member's end.
  Expected<double> collective_end(double start, double duration, const std::vector<std::size_t>& slots);
  Expected<Members> members(const exec::CollectiveCall& c) const;
  Expected<Members> folded_members(const exec::CollectiveCall& c, std::span<const Site> sites) const;
  // A collective's (or start's) label and what it moves: its input, or a start's inputs together.
  std::string label(const exec::Instruction& instruction) const;
  std::int64_t input_bytes(const exec::CollectiveCall& c) const;
  Expected<double> duration(const exec::CollectiveCall& c, std::int64_t bytes) const;
  static std::vector<std::size_t> slots_of(const std::vector<std::uint64_t>& keys);

  // simulator_represented.cc: what represented devices would see.

  // After run(): when collective c runs, from its members' arrivals as their representatives reached
  // them; once per tag.
  Expected<std::pair<double, double>> span(const exec::CollectiveCall& c);
  // After run(): when the sender of device d's recv r issues, read from the sender's representative.
  double issue_seen(const exec::Recv& r, int d) const;

  const exec::ExecPlan& exec_;
  const Durations& durations_;
  const CommIndex& index_;
  std::vector<int> represented_by_;                 // by device
  bool folded_ = false;
  std::vector<int> slot_of_;                        // by device: its slot, -1 when not simulated
  std::vector<Slot> slots_;
  // Slot s's compute stream is agent kAgentsPerSlot * s, its communication stream the next, its
  // activations' starts the next, then its host's and its PCIe link's (offloaded steps and their
  // copies), then its parameters' and gradients' starts.
  static constexpr std::size_t kAgentsPerSlot = 6, kCommunicationAgent = 1, kStartsAgent = 2, kParameterStartsAgent = 5;
  // A start whose output is a parameter or a parameter's gradient (a bucket, a ZeRO gather or
  // reduce-scatter: the data-parallel communicator's) runs on the parameters' start stream.
  bool moves_parameters(const exec::CollectiveStart& start) const;
  std::vector<Agent> agents_;
  std::vector<double> ready_;                       // by buffer
  std::vector<std::vector<std::size_t>> waiters_;   // by buffer: agents waiting for it to be written
  std::unordered_map<std::uint64_t, std::vector<Waiter>> waiters_at_;  // by key(slot, position)
  std::unordered_map<std::int64_t, PendingCollective> pending_;       // by tag
  std::unordered_map<std::int64_t, std::pair<double, double>> spans_;  // by tag, for check_represented
  std::vector<std::size_t> worklist_;
  std::vector<Event> events_;
};

}  // namespace loom::sim::detail
