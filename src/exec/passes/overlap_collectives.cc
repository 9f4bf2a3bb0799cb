// overlap_collectives (exec/passes.h): the blocking all-reduces of activations and activation gradients
// (tensor parallelism's partial sums) become a start right after the instruction writing their input and
// a wait right before their first reader, so the compute between runs beside them (Oases' overlap). A
// hierarchical reduction (reduce-scatter inside a fast sub-group, all-reduce across, all-gather inside)
// becomes one all-reduce start over the union of its groups.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "loom/exec/instruction_buffers.h"
#include "loom/exec/passes.h"
#include "program_edits.h"

namespace loom::exec {
namespace {

using detail::Issue;
using detail::ProgramEdit;

// One blocking reduction of an activation (or an activation's gradient) on one device: an all-reduce,
// or a chain of reduce-scatters, an all-reduce and all-gathers, each reading the one before.
struct Reduction {
  std::size_t ready = 0;            // the instruction writing its input
  std::vector<std::size_t> places;  // its collectives
  std::size_t first_use = 0;        // the first instruction after it reading or freeing its output
  BufferId input, output;
  std::vector<BufferId> between;    // a chain's intermediate outputs, dropped with its collectives
  std::vector<std::int64_t> tags;   // its collectives' tags
  std::int64_t tag = 0;             // the start's: the all-reduce's, or the least of its chain's component
  std::vector<int> group;           // as the all-reduce lists it; a chain's: the union, ascending
  int order = 0;                    // among the starts placed after `ready`, in program order
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

// The program's chains of an activation: k reduce-scatters, an all-reduce, k all-gathers (k >= 1; a
// two-level hierarchy has k = 2), each reading the one before, the first's input written by a compute,
// each intermediate output read by the next collective only (a free aside). Their tag and group are set
// later, once every member's chains are known (fuse_chains).
template <class Wanted>
std::vector<Reduction> chains_of(const std::vector<Instruction>& program, Wanted&& wanted) {
  std::unordered_map<std::uint32_t, std::vector<std::size_t>> readers;  // buffer -> positions reading it
  std::unordered_map<std::uint32_t, std::size_t> writer, freed;         // by compute only; its free
  for (std::size_t i = 0; i < program.size(); ++i) {
    for_each_read(program[i], [&](BufferId b) { readers[b.value].push_back(i); });
    if (const auto* f = std::get_if<Free>(&program[i])) freed.emplace(f->buffer.value, i);
  }
  // The collective at the only reader of `b`, when it reads `b` as its input.
  const auto next = [&](BufferId b) -> const Collective* {
    const auto it = readers.find(b.value);
    if (it == readers.end() || it->second.size() != 1) return nullptr;
    const auto* c = std::get_if<Collective>(&program[it->second.front()]);
    return c != nullptr && c->input == b ? c : nullptr;
  };
  std::vector<Reduction> found;
  for (std::size_t i = 0; i < program.size(); ++i) {
    if (std::holds_alternative<Compute>(program[i]))
      for_each_written(program[i], [&](BufferId b) { writer[b.value] = i; });
    const auto* scatter = std::get_if<Collective>(&program[i]);
    if (scatter == nullptr || scatter->kind != comm::Primitive::reduce_scatter || !wanted(*scatter)) continue;
    const auto ready = writer.find(scatter->input.value);
    if (ready == writer.end()) continue;
    Reduction chain{.ready = ready->second, .places = {i}, .input = scatter->input, .tags = {scatter->tag}};
    const Collective* last = scatter;
    int open = 1;  // reduce-scatters not yet gathered back
    bool reduced = false;
    while (open > 0) {
      const Collective* c = next(last->output);
      if (c == nullptr) break;
      if (!reduced && c->kind == comm::Primitive::reduce_scatter) ++open;
      else if (!reduced && c->kind == comm::Primitive::all_reduce) reduced = true;
      else if (reduced && c->kind == comm::Primitive::all_gather) --open;
      else break;
      chain.between.push_back(last->output);
      chain.places.push_back(readers[last->output.value].front());
      chain.tags.push_back(c->tag);
      last = c;
    }
    if (open > 0) continue;
    chain.output = last->output;
    chain.first_use = program.size();
    if (const auto it = readers.find(last->output.value); it != readers.end()) chain.first_use = it->second.front();
    if (const auto it = freed.find(last->output.value); it != freed.end())
      chain.first_use = std::min(chain.first_use, it->second);
    found.push_back(std::move(chain));
  }
  return found;
}

// A chain's start is one all-reduce over the union of the groups its members' chains name: chains are
// joined through shared tags (each member's reduce-scatters, all-reduce and all-gathers), and each joined
// component takes its least tag and the union of its collectives' groups.
void fuse_chains(const ExecPlan& exec, std::vector<std::vector<Reduction>>& reductions) {
  std::unordered_map<std::int64_t, std::int64_t> parent;
  const auto root = [&](std::int64_t t) {
    while (parent.at(t) != t) t = parent.at(t);
    return t;
  };
  const auto join = [&](std::int64_t a, std::int64_t b) {
    parent.try_emplace(a, a);
    parent.try_emplace(b, b);
    a = root(a), b = root(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  };
  for (const auto& device : reductions)
    for (const Reduction& r : device)
      for (std::int64_t t : r.tags) join(r.tags.front(), t);
  std::map<std::int64_t, std::set<int>> members;  // component root -> the devices of its collectives
  for (std::size_t d = 0; d < exec.programs.size(); ++d)
    for (const Instruction& in : exec.programs[d])
      if (const auto* c = std::get_if<Collective>(&in); c != nullptr && parent.contains(c->tag))
        members[root(c->tag)].insert(c->group.begin(), c->group.end());
  for (auto& device : reductions)
    for (Reduction& r : device)
      if (r.tags.size() > 1) {
        r.tag = root(r.tags.front());
        r.group.assign(members[r.tag].begin(), members[r.tag].end());
      }
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
    found.push_back(Reduction{.ready = a.ready, .places = {a.place}, .first_use = a.first_use, .input = c.input,
                              .output = c.output, .tags = {c.tag}, .tag = c.tag, .group = c.group});
  }
  for (Reduction& chain : chains_of(program, activation)) found.push_back(std::move(chain));
  std::ranges::sort(found, {}, [](const Reduction& r) { return std::pair{r.ready, r.places.front()}; });
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
  fuse_chains(exec, reductions);
  // Decided for all members at once: a tag every member overlaps, in groups whose members still issue
  // their collectives in one order once the starts move ahead of the blocking ones left.
  detail::keep_agreed_by_all_members(reductions);
  std::unordered_set<std::int64_t> replaced;
  std::vector<std::vector<Issue>> started(reductions.size());
  for (std::size_t d = 0; d < reductions.size(); ++d)
    for (const Reduction& r : reductions[d])
      if (r.valid) {
        replaced.insert(r.tags.begin(), r.tags.end());
        std::vector<int> group = r.group;
        std::ranges::sort(group);
        started[d].push_back(Issue{r.ready, r.order, r.tag, std::move(group)});
      }
  const std::set<std::vector<int>> disordered = detail::groups_out_of_order_after(exec, replaced, std::move(started));
  std::unordered_set<std::int64_t> overlapped;
  bool fused = false;
  for (std::size_t d = 0; d < exec.programs.size(); ++d) {
    auto& program = exec.programs[d];
    ProgramEdit edit;
    std::unordered_set<std::uint32_t> refreed, dropped;
    // Starts after one instruction go in program order (insert_after keeps the order given).
    for (const Reduction& r : reductions[d]) {
      std::vector<int> group = r.group;
      std::ranges::sort(group);
      if (!r.valid || disordered.contains(group)) continue;
      // The start keeps the all-reduce's tag (and its CollectiveInfo): the blocking form is gone. A chain's
      // other tags name no instruction any more.
      for (std::size_t place : r.places) edit.remove(place);
      edit.insert_after(r.ready, CollectiveStart{comm::Primitive::all_reduce, r.group, r.tag, {r.input}, {r.output}});
      for (BufferId b : r.between) dropped.insert(b.value);
      fused = fused || !r.between.empty();
      refreed.insert(r.input.value);  // freed after the start reads it
      if (r.first_use < program.size()) edit.insert_before(r.first_use, CollectiveWait{r.tag});
      else edit.insert_after(program.size() - 1, CollectiveWait{r.tag});
      overlapped.insert(r.tag);
    }
    if (!edit.empty()) std::move(edit).apply(program, dropped, refreed);
  }
  if (fused) detail::drop_unwritten_buffers(exec);
  return static_cast<int>(overlapped.size());
}

}  // namespace loom::exec
