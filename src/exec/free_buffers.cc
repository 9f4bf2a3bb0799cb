#include "free_buffers.h"

namespace loom::exec::detail {

std::vector<BufferId> reads_of(const Instruction& instruction) {
  struct Visitor {
    std::vector<BufferId> operator()(const Compute& c) const {
      std::vector<BufferId> r;
      for (BufferId b : c.inputs)
        if (b.valid()) r.push_back(b);
      return r;
    }
    std::vector<BufferId> operator()(const Load&) const { return {}; }
    std::vector<BufferId> operator()(const Collective& c) const { return {c.input}; }
    std::vector<BufferId> operator()(const Send& s) const { return {s.buffer}; }
    std::vector<BufferId> operator()(const Recv&) const { return {}; }
    std::vector<BufferId> operator()(const Local& l) const { return l.inputs; }
    std::vector<BufferId> operator()(const Free&) const { return {}; }
  };
  return std::visit(Visitor{}, instruction);
}

std::vector<BufferId> writes_of(const Instruction& instruction) {
  struct Visitor {
    std::vector<BufferId> operator()(const Compute& c) const { return c.outputs; }
    std::vector<BufferId> operator()(const Load& l) const { return {l.output}; }
    std::vector<BufferId> operator()(const Collective& c) const { return {c.output}; }
    std::vector<BufferId> operator()(const Send&) const { return {}; }
    std::vector<BufferId> operator()(const Recv& r) const { return {r.buffer}; }
    std::vector<BufferId> operator()(const Local& l) const { return {l.output}; }
    std::vector<BufferId> operator()(const Free&) const { return {}; }
  };
  return std::visit(Visitor{}, instruction);
}

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
      for (BufferId b : writes_of(program[i])) last[b.index()] = static_cast<std::ptrdiff_t>(i);
      for (BufferId b : reads_of(program[i])) last[b.index()] = static_cast<std::ptrdiff_t>(i);
    }
    std::vector<std::vector<BufferId>> dying(program.size());
    for (std::size_t i = 0; i < program.size(); ++i)
      for (BufferId b : writes_of(program[i]))
        if (read_as_data[exec.buffer(b).piece.tensor.index()]) dying[static_cast<std::size_t>(last[b.index()])].push_back(b);
    std::vector<Instruction> freed;
    freed.reserve(program.size() * 2);
    for (std::size_t i = 0; i < program.size(); ++i) {
      freed.push_back(std::move(program[i]));
      for (BufferId b : dying[i]) freed.push_back(Free{b});
    }
    program = std::move(freed);
  }
}

}  // namespace loom::exec::detail
