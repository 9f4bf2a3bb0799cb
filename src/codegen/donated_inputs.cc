#include "donated_inputs.h"

#include <algorithm>
#include <set>
#include <string_view>

#include "loom/exec/instruction_buffers.h"

namespace loom::codegen::detail {
namespace {

bool is_optimizer_step(std::string_view type) { return type == "sgd" || type == "adam" || type == "adamw"; }

}  // namespace

std::map<std::size_t, std::vector<int>> donated_optimizer_inputs(const exec::ExecPlan& exec, int rank) {
  const auto& program = exec.programs[static_cast<std::size_t>(rank)];
  const ir::Graph& graph = *exec.plan->graph;
  // The last instruction reading each buffer, and how many loads each tensor has here.
  std::map<std::uint32_t, std::size_t> last_read;
  std::map<std::uint32_t, int> loads_of_tensor;
  std::set<std::uint32_t> loaded;
  const auto read_at = [&](exec::BufferId b, std::size_t i) {
    if (b.valid()) last_read[b.value] = std::max(last_read[b.value], i);
  };
  for (std::size_t i = 0; i < program.size(); ++i) {
    exec::for_each_read(program[i], [&](exec::BufferId b) { read_at(b, i); });
    if (const auto* load = std::get_if<exec::Load>(&program[i])) {
      loaded.insert(load->output.value);
      ++loads_of_tensor[exec.buffer(load->output).piece.tensor.value];
    }
  }

  std::map<std::size_t, std::vector<int>> donated;
  for (std::size_t i = 0; i < program.size(); ++i) {
    const auto* c = std::get_if<exec::Compute>(&program[i]);
    if (c == nullptr) continue;
    const ir::Op& op = graph.op(exec.plan->sub_op(c->sub_op).op);
    if (op.pass != ir::Pass::optimizer || !is_optimizer_step(op.type)) continue;
    for (std::size_t k = 0; k < c->inputs.size(); ++k) {
      const exec::BufferId b = c->inputs[k];
      if (k == 1 || !b.valid() || !loaded.contains(b.value)) continue;  // input 1: the gradient, never written
      if (loads_of_tensor[exec.buffer(b).piece.tensor.value] != 1 || last_read[b.value] != i) continue;
      if (std::count(c->inputs.begin(), c->inputs.end(), b) != 1) continue;  // passed twice: both would alias
      donated[i].push_back(static_cast<int>(k));
    }
  }
  return donated;
}

}  // namespace loom::codegen::detail
