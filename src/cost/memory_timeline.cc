#include "loom/cost/memory_timeline.h"

#include <cassert>
#include <unordered_set>

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
    std::visit(
        [&](const auto& i) {
          using T = std::decay_t<decltype(i)>;
          if constexpr (std::is_same_v<T, exec::Compute>) {
            for (exec::BufferId out : i.outputs) change(out, true);
          } else if constexpr (std::is_same_v<T, exec::Load> || std::is_same_v<T, exec::Collective> ||
                               std::is_same_v<T, exec::Local>) {
            change(i.output, true);
          } else if constexpr (std::is_same_v<T, exec::Recv>) {
            change(i.buffer, true);
          } else if constexpr (std::is_same_v<T, exec::Free>) {
            change(i.buffer, false);
          }
        },
        instruction);
    held.push_back(current);
  }
  return held;
}

}  // namespace loom::cost
