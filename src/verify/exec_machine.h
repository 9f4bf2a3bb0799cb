// Private to the ExecPlan interpreter: the state of a running ExecPlan (buffers, program counters, sends
// in flight) and one step of one device. exec_instructions.cc executes each instruction kind;
// exec_interpreter.cc schedules the devices and reports deadlocks.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "loom/exec/exec_plan.h"
#include "loom/verify/exec_interpreter.h"

namespace loom::verify::detail {

enum class BufferState : std::uint8_t { unwritten, written, freed };
enum class Progress : std::uint8_t { advanced, blocked };

// A sent piece waiting for its recv: sends are buffered, so the sender may free its buffer right after.
struct Message {
  PlanPiece piece;
  std::size_t instruction = 0;  // the send's index in the sender's program, for errors
};

class Machine {
 public:
  // `exec.plan` and its graph must be set, and exec.programs hold exec.num_devices programs.
  Machine(const exec::ExecPlan& exec, const std::vector<NdArray>& initial, const KernelRegistry& kernels);

  // Runs every device to its end; errors carry the device and instruction that failed.
  Expected<ExecRun> run();

 private:
  const std::vector<exec::Instruction>& program(int d) const { return exec_.programs[static_cast<std::size_t>(d)]; }
  std::size_t pc(int d) const { return pc_[static_cast<std::size_t>(d)]; }
  bool done(int d) const { return pc(d) >= program(d).size(); }
  const exec::Instruction& current(int d) const { return program(d)[pc(d)]; }
  std::string at(int d) const;                       // "device 1 instruction 4 (free b7)"
  std::string buffer_name(exec::BufferId id) const;  // "buffer b7 %fc1.weight.grad[0:16, 0:8] (1 of 2)"
  Progress advance(int d) {
    ++pc_[static_cast<std::size_t>(d)];
    return Progress::advanced;
  }

  // Buffer access: a buffer of another device, out of range, read outside [write, free) or written
  // twice is a materialization error.
  Expected<const exec::Buffer*> buffer_of(int d, exec::BufferId id) const;
  Expected<const exec::Buffer*> readable(int d, exec::BufferId id) const;  // written, not freed
  Expected<PlanPiece> read(int d, exec::BufferId id) const;               // a copy of its piece and values
  Expected<void> write(int d, exec::BufferId id, NdArray value);

  // One instruction of device d (exec_instructions.cc). A recv or collective whose data is not there
  // yet is blocked, and so is a wait whose collective some member has not started; everything else
  // (a start included) runs at once.
  Expected<Progress> step(int d);
  Expected<Progress> execute(int d, const exec::Compute& compute);
  Expected<Progress> execute(int d, const exec::Load& load);
  Expected<Progress> execute(int d, const exec::Collective& collective);
  Expected<Progress> execute(int d, const exec::Send& send);
  Expected<Progress> execute(int d, const exec::Recv& recv);
  Expected<Progress> execute(int d, const exec::Local& local);
  Expected<Progress> execute(int d, const exec::Free& free);
  Expected<Progress> execute(int d, const exec::CollectiveStart& start);
  Expected<Progress> execute(int d, const exec::CollectiveWait& wait);
  // The members' instructions of a collective, once all are at it; nullopt while some are not.
  Expected<std::optional<std::vector<const exec::Collective*>>> collective_members(int d, const exec::Collective& c) const;

  Error deadlock() const;
  std::string waits_for(int d) const;
  Expected<void> check_finished() const;

  const exec::ExecPlan& exec_;
  const plan::Plan& plan_;
  const ir::Graph& graph_;
  const std::vector<NdArray>& initial_;
  const KernelRegistry& kernels_;
  std::vector<ir::OpId> producer_;
  std::vector<NdArray> data_;  // by BufferId
  std::vector<BufferState> state_;
  std::vector<std::size_t> pc_;  // by device: the next instruction
  std::vector<int> computed_;    // by SubOpId: times computed
  std::map<std::tuple<int, int, std::int64_t>, std::deque<Message>> mailbox_;  // (sender, receiver, tag)
  // An asynchronous collective: what each member that has started it read (its inputs then; a chained
  // start's input when the start writing it completes); summed, scattered or placed into every member's
  // outputs once the last member has started it and no input is still to come.
  struct Started {
    const exec::CollectiveStart* first = nullptr;  // the first member's start, which the others must agree with
    std::map<int, std::vector<PlanPiece>> inputs;   // by member
    std::map<int, const exec::CollectiveStart*> members;
    int open_inputs = 0;  // chained inputs not yet written
    bool done = false;
  };
  // A chained start's input i on a device, read when the start writing it completes.
  struct ChainedRead {
    std::int64_t tag = 0;
    int device = 0;
    std::size_t input = 0;
  };
  Expected<void> complete_start(std::int64_t tag);  // runs it (and the chained starts it frees) if it can
  std::map<std::int64_t, Started> started_;  // by tag
  std::map<std::uint32_t, std::vector<ChainedRead>> chained_reads_;  // by buffer an incomplete start writes
  ExecRun run_;
};

}  // namespace loom::verify::detail
