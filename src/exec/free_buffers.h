// Private to materialization: frees every buffer after its last use on its device.
#pragma once

#include "loom/exec/exec_plan.h"

namespace loom::exec::detail {

// Appends a Free after each buffer's last read (or its write, when nothing reads it), except buffers of
// tensors no sub-op reads as data: updated parameters, optimizer states and the loss outlive the step.
void free_after_last_use(ExecPlan& exec);

// Calls f(BufferId) for each buffer an instruction reads (or writes), allocating nothing: a plan has
// millions of instructions.
template <class F>
void for_each_read(const Instruction& instruction, F&& f) {
  if (const auto* c = std::get_if<Compute>(&instruction)) {
    for (BufferId b : c->inputs)
      if (b.valid()) f(b);
  } else if (const auto* c = std::get_if<Collective>(&instruction)) {
    f(c->input);
  } else if (const auto* s = std::get_if<Send>(&instruction)) {
    f(s->buffer);
  } else if (const auto* l = std::get_if<Local>(&instruction)) {
    for (BufferId b : l->inputs) f(b);
  }
}
template <class F>
void for_each_write(const Instruction& instruction, F&& f) {
  if (const auto* c = std::get_if<Compute>(&instruction)) {
    for (BufferId b : c->outputs) f(b);
  } else if (const auto* l = std::get_if<Load>(&instruction)) {
    f(l->output);
  } else if (const auto* c = std::get_if<Collective>(&instruction)) {
    f(c->output);
  } else if (const auto* r = std::get_if<Recv>(&instruction)) {
    f(r->buffer);
  } else if (const auto* l = std::get_if<Local>(&instruction)) {
    f(l->output);
  }
}

}  // namespace loom::exec::detail
