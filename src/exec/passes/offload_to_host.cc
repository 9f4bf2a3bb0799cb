// offload_to_host (exec/passes.h): ZeRO-Offload's optimizer steps on the host, in two edits per program.
//  1. The steps move: their states and master weights become host buffers, the updated 16-bit parameter
//     a host buffer copied back to the GPU buffer it was (optimizer only) or left on the host (with the
//     parameters), the unread 16-bit parameter input dropped (master weights).
//  2. Memories agree: each read of a buffer in the other memory gets a copy, a gradient's to the host
//     right after the gradient is final (its GPU buffer freed after it when nothing else reads it), a
//     host parameter's to the GPU right before the gather reading it (freed right after).
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "loom/exec/passes.h"
#include "loom/exec/instruction_buffers.h"
#include "program_edits.h"

namespace loom::exec {
namespace {

bool is_step(const ExecPlan& exec, const Instruction& instruction) {
  const auto* c = std::get_if<Compute>(&instruction);
  return c != nullptr && exec.plan->op_of(c->sub_op).pass == ir::Pass::optimizer;
}

bool has_master_weights(const ExecPlan& exec, const Compute& c) {
  return ir::get_bool_or(exec.plan->op_of(c.sub_op).attrs, "master_weights", false).value_or(false);
}

bool host_compute(const ExecPlan& exec, const Compute& c) {
  return !c.outputs.empty() && c.outputs.front().index() < exec.buffers.size() &&
         exec.buffer(c.outputs.front()).memory == Memory::host;
}

BufferId copy_of(ExecPlan& exec, BufferId b, Memory memory) {
  const Buffer& from = exec.buffer(b);
  return exec.add_buffer(from.device, plan::SubTensor(from.piece), from.bytes, memory);
}

// Edit 1 on one program: the steps run on the host.
void move_steps(ExecPlan& exec, std::vector<Instruction>& program, Offload offload, ExecPassStats& stats) {
  detail::ProgramEdit edit;
  for (std::size_t i = 0; i < program.size(); ++i) {
    if (!is_step(exec, program[i])) continue;
    Compute step = std::get<Compute>(program[i]);
    ++stats.host_steps;
    for (std::size_t k = 2; k < step.inputs.size(); ++k) exec.buffers[step.inputs[k].index()].memory = Memory::host;
    for (std::size_t k = 1; k < step.outputs.size(); ++k) exec.buffers[step.outputs[k].index()].memory = Memory::host;
    if (offload == Offload::optimizer_and_params) {
      exec.buffers[step.inputs[0].index()].memory = Memory::host;
      exec.buffers[step.outputs[0].index()].memory = Memory::host;
    } else {
      if (has_master_weights(exec, step)) step.inputs[0] = kNoBuffer;  // the update runs on the master copy
      const BufferId on_gpu = step.outputs[0];
      step.outputs[0] = copy_of(exec, on_gpu, Memory::host);
      edit.insert_after(i, Local{LocalKind::copy, {step.outputs[0]}, on_gpu});
      edit.insert_after(i, Free{step.outputs[0]});
      ++stats.host_copies;
    }
    edit.replace(i, std::move(step));
  }
  std::move(edit).apply(program, {}, {});
}

// Edit 2 on one program: a copy wherever an instruction reads a buffer of the other memory.
void agree_memories(ExecPlan& exec, std::vector<Instruction>& program, ExecPassStats& stats) {
  detail::ProgramEdit edit;
  std::unordered_map<std::uint32_t, std::size_t> ready;       // buffer -> position after which it may be read
  std::unordered_map<std::int64_t, std::vector<BufferId>> started;  // tag -> a start's outputs
  std::unordered_map<std::uint32_t, BufferId> on_host;        // GPU buffer -> its host copy
  std::unordered_set<std::uint32_t> refreed;                  // GPU buffers whose Free moves behind the copy
  for (std::size_t i = 0; i < program.size(); ++i) {
    Instruction& in = program[i];
    const bool host = runs_on_host(exec, in);
    const bool neutral = std::holds_alternative<Free>(in) || std::holds_alternative<Load>(in) ||
                         std::holds_alternative<CollectiveWait>(in) ||
                         (std::holds_alternative<Local>(in) && std::get<Local>(in).kind == LocalKind::copy);
    if (!neutral) {
      for_each_read(in, [&](BufferId& b) {
        const Memory memory = exec.buffer(b).memory;
        if ((memory == Memory::host) == host) return;
        if (host) {  // a gradient to the host as soon as it is final
          auto [it, fresh] = on_host.try_emplace(b.value, BufferId{});
          if (fresh) {  // one step reads each gradient piece: its copy dies with that step
            it->second = copy_of(exec, b, Memory::host);
            const Local copy{LocalKind::copy, {b}, it->second};
            if (const auto r = ready.find(b.value); r != ready.end()) edit.insert_after(r->second, copy);
            else edit.insert_before(i, copy);
            edit.insert_after(i, Free{it->second});
            refreed.insert(b.value);
            ++stats.host_copies;
          }
          b = it->second;
        } else {  // a host parameter to the GPU for the one instruction reading it
          const BufferId gpu = copy_of(exec, b, Memory::gpu);
          edit.insert_before(i, Local{LocalKind::copy, {b}, gpu});
          edit.insert_after(i, Free{gpu});
          ++stats.host_copies;
          b = gpu;
        }
      });
    }
    if (const auto* s = std::get_if<CollectiveStart>(&in)) {
      started[s->tag] = s->outputs;
    } else if (const auto* w = std::get_if<CollectiveWait>(&in)) {
      for (BufferId b : started[w->tag]) ready[b.value] = i;
    } else {
      for_each_written(in, [&](BufferId b) { ready[b.value] = i; });
    }
  }
  std::move(edit).apply(program, {}, refreed);
}

}  // namespace

std::string_view name(Offload offload) {
  switch (offload) {
    case Offload::none: return "none";
    case Offload::optimizer: return "optimizer";
    case Offload::optimizer_and_params: return "optimizer+params";
  }
  return "?";
}

Expected<Offload> parse_offload(std::string_view text) {
  for (const Offload o : {Offload::none, Offload::optimizer, Offload::optimizer_and_params})
    if (text == name(o)) return o;
  return fail(fmt::format("unknown offload '{}'", text),
              "use none, optimizer (ZeRO-Offload: optimizer states and step on the host) or optimizer+params "
              "(also the 16-bit parameters, with ZeRO-3)");
}

bool runs_on_host(const ExecPlan& exec, const Instruction& instruction) {
  const auto* c = std::get_if<Compute>(&instruction);
  return c != nullptr && host_compute(exec, *c);
}

bool unread_parameter(const ExecPlan& exec, const Compute& c, std::size_t input) {
  return input == 0 && exec.plan != nullptr && c.sub_op.index() < exec.plan->sub_ops.size() &&
         exec.plan->op_of(c.sub_op).pass == ir::Pass::optimizer && has_master_weights(exec, c) &&
         host_compute(exec, c);
}

ExecPassStats offload_to_host(ExecPlan& exec, Offload offload) {
  ExecPassStats stats;
  if (offload == Offload::none) return stats;
  for (auto& program : exec.programs) {
    move_steps(exec, program, offload, stats);
    agree_memories(exec, program, stats);
  }
  return stats;
}

}  // namespace loom::exec
