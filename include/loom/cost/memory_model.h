// Memory model (DESIGN.md, "Cost model and simulator"): the bytes each device holds over its program.
// A buffer counts from the instruction that writes it (compute, load, collective, recv, local; a start's
// outputs from the start, read though they are only after its wait) to its Free; buffers never freed
// (updated parameters and optimizer states, the loss) stay to the end. Peak
// is the largest total after any instruction, and its breakdown is by the role of the buffers' tensors.
// Host buffers (offloaded optimizer states and parameters) are counted apart, as host_peak_bytes.
// Communication libraries' own staging buffers and allocator fragmentation are not modelled.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/cluster/gpu.h"
#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"
#include "loom/exec/fold.h"
#include "loom/ir/tensor.h"

namespace loom::cost {

inline constexpr std::size_t kRoleCount = 6;  // ir::TensorRole values

// Bytes by ir::TensorRole (indexed by the enum's value).
struct RoleBytes {
  std::array<std::int64_t, kRoleCount> bytes{};

  std::int64_t& operator[](ir::TensorRole role) { return bytes[static_cast<std::size_t>(role)]; }
  std::int64_t operator[](ir::TensorRole role) const { return bytes[static_cast<std::size_t>(role)]; }
  std::int64_t total() const;
  // "parameter 1.5 GiB, gradient 1.5 GiB, ..." (non-zero roles, largest first; ties by role order).
  std::string to_string() const;
  bool operator==(const RoleBytes&) const = default;
};

// What a device keeps across steps. Parameters and optimizer states: the pieces the device loads (their
// residence, plan/residence.h); gradients: the pieces of final gradients its optimizer steps read, and
// the pieces its sub-ops write of final gradients without a residence, which stay as produced until the
// steps read them (the full unreduced gradient of data parallelism and ZeRO-1; ZeRO-2 reduces its
// gradients into their shards as soon as they are complete, so only the shards count). Each element of
// a tensor counts once: value parts and replicas of one box, and boxes inside another box of the same
// tensor, are not added again (a vocabulary-parallel embedding whose tied head reads the whole table
// counts the table once).
struct ModelState {
  std::int64_t parameter_bytes = 0;
  std::int64_t gradient_bytes = 0;
  std::int64_t optimizer_state_bytes = 0;

  std::int64_t total() const { return parameter_bytes + gradient_bytes + optimizer_state_bytes; }
  bool operator==(const ModelState&) const = default;
};

struct DeviceMemory {
  int device = 0;
  std::int64_t peak_bytes = 0;
  std::size_t peak_instruction = 0;  // index in the device's program after which the peak is reached
  RoleBytes at_peak;                 // breakdown of peak_bytes
  std::int64_t final_bytes = 0;      // held after the last instruction
  ModelState model_state;            // in GPU memory (offloaded states are host bytes)
  // The largest total of its host buffers (exec_plan.h's Memory::host: ZeRO-Offload's states), counted
  // apart from the GPU's peak above, in its node's host memory.
  std::int64_t host_peak_bytes = 0;
};

struct MemoryReport {
  std::vector<DeviceMemory> devices;  // by device
  // The device with the largest peak (the first one on ties); -1 with no devices.
  int max_device() const;
};

MemoryReport memory_usage(const exec::ExecPlan& exec);
// A folded step (exec/fold.h): each image of a class holds what its representative holds.
MemoryReport memory_usage(const exec::FoldedStep& folded);

// Fails when some device's peak exceeds gpu.memory_bytes; the message names every such device (the
// first few) with its peak, the capacity and the breakdown at the peak.
Expected<void> check_fits(const MemoryReport& report, const cluster::GpuSpec& gpu);

// "1.50 GiB" (binary units, two decimals; bytes below 1 KiB as "512 B").
std::string format_bytes(double bytes);

}  // namespace loom::cost
