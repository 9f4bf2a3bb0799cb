// The bytes a device holds after each instruction of its program, by memory_usage's accounting
// (memory_model.h): a buffer counts from the instruction that writes it to its Free. The largest value
// is that device's DeviceMemory::peak_bytes; the simulator joins the series with instruction times.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/exec/exec_plan.h"

namespace loom::cost {

// Aligned with exec.programs[device]. Cost: linear in the program's length.
std::vector<std::int64_t> bytes_after_each_instruction(const exec::ExecPlan& exec, int device);

}  // namespace loom::cost
