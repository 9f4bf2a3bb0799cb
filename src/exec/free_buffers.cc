#include "free_buffers.h"

#include <algorithm>

#include "loom/core/both_cores.h"
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
  // A program touches only its own device's buffers, so the programs' entries of `last` are disjoint and
  // the programs are freed on both cores (core/both_cores.h): the same bytes as one loop.
  std::vector<std::ptrdiff_t> last(exec.buffers.size(), -1);
  for_each_on_both_cores(exec.programs.size(), [&](std::size_t device) {
    std::vector<Instruction>& program = exec.programs[device];
    // Another device's buffer in this program is an error check_exec_plan names; here it is skipped, so
    // that no two walks ever write one entry.
    const auto used = [&](BufferId b, std::ptrdiff_t at) {
      if (exec.buffer(b).device == static_cast<int>(device)) last[b.index()] = at;
    };
    for (std::size_t i = 0; i < program.size(); ++i) {
      const auto at = static_cast<std::ptrdiff_t>(i);
      for_each_written(program[i], [&](BufferId b) { used(b, at); });
      for_each_read(program[i], [&](BufferId b) { used(b, at); });
    }
    // (position of the last use, buffer) of every buffer to free, sorted by position.
    std::vector<std::pair<std::ptrdiff_t, BufferId>> dying;
    for (std::size_t i = 0; i < program.size(); ++i)
      for_each_written(program[i], [&](BufferId b) {
        if (exec.buffer(b).device == static_cast<int>(device) && read_as_data[exec.buffer(b).piece.tensor.index()])
          dying.emplace_back(last[b.index()], b);
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
  });
}

}  // namespace loom::exec::detail
