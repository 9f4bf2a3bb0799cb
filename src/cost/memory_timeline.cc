#include "loom/cost/memory_timeline.h"

#include <cassert>
#include <unordered_set>

#include "loom/exec/instruction_buffers.h"

namespace loom::cost {

std::vector<std::int64_t> bytes_after_each_instruction(const exec::ExecPlan& exec, int device) {
  assert(device >= 0 && static_cast<std::size_t>(device) < exec.programs.size());
  const auto& program = exec.programs[static_cast<std::size_t>(device)];
  std::vector<std::int64_t> held;
  held.reserve(program.size());
  std::unordered_set<std::uint32_t> live;  // this device's buffers only: no per-plan array
  std::int64_t current = 0;
  // As memory_usage: a buffer changes state once, whatever writes or frees it again.
  const auto change = [&](exec::BufferId id, bool alive) {
    if (!id.valid() || id.index() >= exec.buffers.size()) return;
    if (alive ? !live.insert(id.index()).second : live.erase(id.index()) == 0) return;
    current += alive ? exec.buffer(id).bytes : -exec.buffer(id).bytes;
  };
  for (const exec::Instruction& instruction : program) {
    exec::for_each_written(instruction, [&](exec::BufferId id) { change(id, true); });
    if (const auto* free = std::get_if<exec::Free>(&instruction)) change(free->buffer, false);
    held.push_back(current);
  }
  return held;
}

}  // namespace loom::cost
