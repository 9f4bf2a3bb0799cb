// Private to materialization: frees every buffer after its last use on its device.
#pragma once

#include "loom/exec/exec_plan.h"

namespace loom::exec::detail {

// Appends a Free after each buffer's last read (or its write, when nothing reads it), except buffers of
// tensors no sub-op reads as data: updated parameters, optimizer states and the loss outlive the step.
void free_after_last_use(ExecPlan& exec);

}  // namespace loom::exec::detail
