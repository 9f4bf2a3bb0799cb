// overlap_collectives (exec/passes.h): the blocking all-reduces of activations and activation gradients
// (tensor parallelism's partial sums) become a start right after the instruction writing their input and
// a wait right before their first reader, so the compute between runs beside them (Oases' overlap).
#include <algorithm>
#include <map>
#include <unordered_set>

#include "loom/exec/instruction_buffers.h"
#include "loom/exec/passes.h"
#include "program_edits.h"

namespace loom::exec {
namespace {

using detail::Issue;
using detail::ProgramEdit;

// One blocking all-reduce of an activation (or an activation's gradient) on one device.
struct Reduction {
  std::size_t ready = 0;      // the instruction writing its input
  std::size_t place = 0;      // the all-reduce
  std::size_t first_use = 0;  // the first instruction after it reading or freeing its output
  BufferId input, output;
  std::int64_t tag = 0;
  std::vector<int> group;  // as the collective lists it
  int order = 0;           // among the starts placed after `ready`, in program order
  bool valid = true;
};

// Parameters' gradients are reduced once per step by the gradient buckets; optimizer states and
// parameters are never partial sums of a step's compute.
bool is_step_activation(const ir::Graph& graph, ir::TensorId id) {
  const ir::FullTensor& t = graph.tensor(id);
  if (t.role == ir::TensorRole::activation) return true;
  return t.role == ir::TensorRole::gradient && t.owner.valid() &&
         graph.tensor(t.owner).role == ir::TensorRole::activation;
}

// The program's blocking all-reduces of activations whose input a compute writes in this program and
// whose output is read after some other compute could run between the two: the ones worth a start.
std::vector<Reduction> reductions_of(const ExecPlan& exec, const std::vector<Instruction>& program) {
  const ir::Graph& graph = *exec.plan->graph;
  std::vector<Reduction> found;
  const auto activation = [&](const Collective& c) {
    return is_step_activation(graph, exec.buffer(c.output).piece.tensor);
  };
  for (const detail::BlockingAllReduce& a : detail::blocking_all_reduces(program, activation, true)) {
    const Collective& c = *a.collective;
    found.push_back(Reduction{.ready = a.ready, .place = a.place, .first_use = a.first_use, .input = c.input,
                              .output = c.output, .tag = c.tag, .group = c.group, .order = 0, .valid = true});
  }
  std::map<std::size_t, int> starts_after;
  for (Reduction& r : found) {
    // Overlap needs compute between the start and the wait, other than the one that writes the input.
    r.valid = std::any_of(program.begin() + static_cast<std::ptrdiff_t>(r.ready + 1),
                          program.begin() + static_cast<std::ptrdiff_t>(r.first_use),
                          [](const Instruction& in) { return std::holds_alternative<Compute>(in); });
    if (r.valid) r.order = 1 + starts_after[r.ready]++;
  }
  return found;
}

}  // namespace

int overlap_collectives(ExecPlan& exec) {
  if (exec.num_devices < 2) return 0;
  std::vector<std::vector<Reduction>> reductions(exec.programs.size());
  for (std::size_t d = 0; d < exec.programs.size(); ++d) reductions[d] = reductions_of(exec, exec.programs[d]);
  // Decided for all members at once: a tag every member overlaps, in groups whose members still issue
  // their collectives in one order once the starts move ahead of the blocking ones left.
  detail::keep_agreed_by_all_members(reductions);
  std::unordered_set<std::int64_t> replaced;
  std::vector<std::vector<Issue>> started(reductions.size());
  for (std::size_t d = 0; d < reductions.size(); ++d)
    for (const Reduction& r : reductions[d])
      if (r.valid) {
        replaced.insert(r.tag);
        std::vector<int> group = r.group;
        std::ranges::sort(group);
        started[d].push_back(Issue{r.ready, r.order, r.tag, std::move(group)});
      }
  const std::set<std::vector<int>> disordered = detail::groups_out_of_order_after(exec, replaced, std::move(started));
  std::unordered_set<std::int64_t> overlapped;
  for (std::size_t d = 0; d < exec.programs.size(); ++d) {
    auto& program = exec.programs[d];
    ProgramEdit edit;
    std::unordered_set<std::uint32_t> refreed;
    // Starts after one instruction go in program order (insert_after keeps the order given).
    for (const Reduction& r : reductions[d]) {
      std::vector<int> group = r.group;
      std::ranges::sort(group);
      if (!r.valid || disordered.contains(group)) continue;
      const std::vector<const Reduction*> members{&r};
      // The start keeps the all-reduce's tag (and its CollectiveInfo): the blocking form is gone.
      edit.insert_after(r.ready, detail::start_replacing(comm::Primitive::all_reduce, r.tag, members, edit));
      refreed.insert(r.input.value);  // freed after the start reads it
      if (r.first_use < program.size()) edit.insert_before(r.first_use, CollectiveWait{r.tag});
      else edit.insert_after(program.size() - 1, CollectiveWait{r.tag});
      overlapped.insert(r.tag);
    }
    if (!edit.empty()) std::move(edit).apply(program, {}, refreed);
  }
  return static_cast<int>(overlapped.size());
}

}  // namespace loom::exec
