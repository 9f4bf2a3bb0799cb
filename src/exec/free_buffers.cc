#include "free_buffers.h"

#include <algorithm>

#include "loom/exec/instruction_buffers.h"

namespace loom::exec::detail {

void free_after_last_use(ExecPlan& exec) {
  const plan::Plan& plan = *exec.plan;
  std::vector<char> read_as_data(plan.graph->tensors.size(), 0);
  for (const plan::SubOp& s : plan.sub_ops) {
    if (!s.live) continue;
    for (std::size_t i = 0; i < s.inputs.size(); ++i)
      if (!plan.layouts[s.op.index()].shape_only(i)) read_as_data[s.inputs[i].tensor.index()] = 1;
  }
  std::vector<std::ptrdiff_t> last(exec.buffers.size(), -1);
  for (auto& program : exec.programs) {
    for (std::size_t i = 0; i < program.size(); ++i) {
      const auto at = static_cast<std::ptrdiff_t>(i);
      for_each_written(program[i], [&](BufferId b) { last[b.index()] = at; });
      for_each_read(program[i], [&](BufferId b) { last[b.index()] = at; });
    }
    // (position of the last use, buffer) of every buffer to free, sorted by position.
    std::vector<std::pair<std::ptrdiff_t, BufferId>> dying;
    for (std::size_t i = 0; i < program.size(); ++i)
      for_each_written(program[i], [&](BufferId b) {
        if (read_as_data[exec.buffer(b).piece.tensor.index()]) dying.emplace_back(last[b.index()], b);
      });
    std::ranges::stable_sort(dying, {}, &std::pair<std::ptrdiff_t, BufferId>::first);
    std::vector<Instruction> freed;
    freed.reserve(program.size() + dying.size());
    auto next = dying.begin();
    for (std::size_t i = 0; i < program.size(); ++i) {
      freed.push_back(std::move(program[i]));
      for (; next != dying.end() && next->first == static_cast<std::ptrdiff_t>(i); ++next) freed.push_back(Free{next->second});
    }
    program = std::move(freed);
  }
}

}  // namespace loom::exec::detail
