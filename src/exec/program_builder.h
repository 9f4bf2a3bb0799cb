// Private to materialization: appends instructions to an ExecPlan's per-device programs, allocating
// buffers and tags, and counting what it emits.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "concurrent_steps.h"
#include "loom/exec/materialize.h"

namespace loom::exec::detail {

class ProgramBuilder {
 public:
  ProgramBuilder(const plan::Plan& plan, int num_devices);

  ExecPlan& exec() { return exec_; }
  MaterializeStats& stats() { return stats_; }
  const plan::SubTensor& piece(BufferId b) const { return exec_.buffer(b).piece; }
  int device(BufferId b) const { return exec_.buffer(b).device; }

  BufferId new_buffer(int device, plan::SubTensor piece);
  BufferId load(int device, const plan::SubTensor& piece);
  void compute(int device, Compute compute);
  // `piece` restricted to `box` on the buffer's device (the buffer itself when the box is its own).
  BufferId slice(BufferId from, std::vector<plan::IndexRange> box);
  BufferId scale(BufferId from, plan::ValuePart value);
  BufferId combine(int device, std::vector<BufferId> inputs, plan::SubTensor target);
  // One step of a running sum on `device` (exec_plan.h: accumulate): `target` names the part the sum is
  // once complete.
  BufferId accumulate(int device, std::vector<BufferId> inputs, plan::SubTensor target);
  // The buffer's data on `to`: itself when already there, else a send and a receive.
  BufferId transfer(BufferId from, int to, const std::string& rule);
  // A transfer in two halves, so that an exchange among several devices emits every send before any
  // receive: each member's program then reads sends, receives, combine, the same on every member (one
  // device class), instead of a receive-combine-send on one and send-receive-combine on the other.
  struct PendingReceive {
    int from = 0;
    std::int64_t tag = -1;  // -1: no transfer, `buffer` is already on the receiver
    BufferId buffer;
  };
  PendingReceive send(BufferId from, int to, const std::string& rule);  // emits the Send
  BufferId receive(const PendingReceive& pending);                     // emits the Recv
  // One collective over `group` (devices in piece order): inputs[i] on group[i] gives a buffer holding
  // outputs[i] there. Returns the output buffers. `step`: the group step it is one group of
  // (CollectiveInfo::step, from group_step), -1 when it runs alone.
  std::vector<BufferId> collective(comm::Primitive kind, std::span<const int> group, std::span<const BufferId> inputs,
                                   std::span<const plan::SubTensor> outputs, ir::TensorId tensor, const std::string& rule,
                                   std::int64_t step = -1);
  // The ExecPlan's step of these concurrent groups (one entry per distinct list: every layer's equal
  // step shares it); -1 for fewer than two groups.
  std::int64_t group_step(const std::vector<std::vector<int>>& groups);
  // The layout searches that run at once (concurrent_steps.h): the caller opens their sets, the lowering
  // records their steps, and share_concurrent_steps, once every instruction is emitted, joins them.
  ConcurrentSteps& concurrent() { return concurrent_; }
  void share_concurrent_steps();

 private:
  std::int64_t next_tag(ir::TensorId tensor, const std::string& rule, std::int64_t step);
  void emit(int device, Instruction instruction) { exec_.programs[static_cast<std::size_t>(device)].push_back(std::move(instruction)); }

  ExecPlan exec_;
  MaterializeStats stats_;
  ConcurrentSteps concurrent_;
};

std::int64_t piece_bytes(const ir::Graph& graph, const plan::SubTensor& piece);

// A compute's input buffers: `need` for each input the sub-op reads (kNoBuffer for shape-only ones);
// errors name the input and `what` ("sub-op 'fc1[0/2]'").
Expected<std::vector<BufferId>> input_buffers(const plan::Plan& plan, const plan::SubOp& sub_op,
                                              const std::function<Expected<BufferId>(const plan::SubTensor&)>& need,
                                              std::string_view what);

}  // namespace loom::exec::detail
