// overlap_collectives (exec/passes.h): the blocking all-reduces of activations and activation gradients
// (tensor parallelism's partial sums) become a start right after the instruction writing their input and
// a wait right before their first reader, so the compute between runs beside them (Oases' overlap). A
// hierarchical reduction (reduce-scatters inside a fast sub-group, an all-reduce across, all-gathers
// inside) keeps its collectives, so its cost, and starts them all as one chain right after the writer:
// the reduce-scatters, the all-reduce across reading their output and the all-gathers reading its, each
// a chained start (exec_plan.h) that runs on the start stream as soon as its input's start ends; their
// waits stand in chain order right before the sum's first reader.
#include <algorithm>
#include <map>
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
  BufferId input, output;           // the all-reduce's (in a chain, two of `between`)
  std::vector<BufferId> between;    // a chain's intermediate outputs
  std::vector<Collective> scatters, gathers;  // a chain's, in order: started behind `ready`, around the all-reduce
  std::int64_t tag = 0;             // the all-reduce's, which the start keeps
  std::vector<int> group;           // the all-reduce's
  int order = 0;                    // among the collectives issued after `ready`, in program order
  bool valid = true;

  // Every tag the reduction issues: the all-reduce's, then a chain's reduce-scatters' and all-gathers'.
  std::vector<std::int64_t> tags() const {
    std::vector<std::int64_t> out{tag};
    for (const auto* part : {&scatters, &gathers})
      for (const Collective& c : *part) out.push_back(c.tag);
    return out;
  }

  // Every group the reduction issues a collective to, ascending members each; the all-reduce's first.
  std::vector<std::vector<int>> groups() const {
    std::vector<std::vector<int>> out{group};
    for (const auto* part : {&scatters, &gathers})
      for (const Collective& c : *part) out.emplace_back(c.group.begin(), c.group.end());
    for (auto& g : out) std::ranges::sort(g);
    return out;
  }
};

// Parameters' gradients are reduced once per step by the gradient buckets; optimizer states and
// parameters are never partial sums of a step's compute.
bool is_step_activation(const ir::Graph& graph, ir::TensorId id) {
  return graph.tensor(id).role == ir::TensorRole::activation ||
         ir::is_gradient_of(graph, id, ir::TensorRole::activation);
}

// The program's chains of an activation: k reduce-scatters, an all-reduce, k all-gathers (k >= 1; a
// two-level hierarchy has k = 2), each reading the one before, the first's input written by a compute,
// each intermediate output read by the next collective only (a free aside).
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
    Reduction chain{.ready = ready->second, .places = {i}, .scatters = {*scatter}};
    const Collective* last = scatter;
    const Collective* reduce = nullptr;
    int open = 1;  // reduce-scatters not yet gathered back
    while (open > 0) {
      const Collective* c = next(last->output);
      if (c == nullptr) break;
      if (reduce == nullptr && c->kind == comm::Primitive::reduce_scatter) {
        ++open;
        chain.scatters.push_back(*c);
      } else if (reduce == nullptr && c->kind == comm::Primitive::all_reduce) {
        reduce = c;
      } else if (reduce != nullptr && c->kind == comm::Primitive::all_gather) {
        --open;
        chain.gathers.push_back(*c);
      } else {
        break;
      }
      chain.between.push_back(last->output);
      chain.places.push_back(readers[last->output.value].front());
      last = c;
    }
    if (open > 0) continue;
    chain.input = reduce->input;
    chain.output = reduce->output;
    chain.tag = reduce->tag;
    chain.group = reduce->group;
    chain.first_use = program.size();
    if (const auto it = readers.find(last->output.value); it != readers.end()) chain.first_use = it->second.front();
    if (const auto it = freed.find(last->output.value); it != freed.end())
      chain.first_use = std::min(chain.first_use, it->second);
    found.push_back(std::move(chain));
  }
  return found;
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
                              .output = c.output, .tag = c.tag, .group = c.group});
  }
  for (Reduction& chain : chains_of(program, activation)) found.push_back(std::move(chain));
  std::ranges::sort(found, {}, [](const Reduction& r) { return std::pair{r.ready, r.places.front()}; });
  std::map<std::size_t, int> starts_after;
  for (Reduction& r : found) {
    // Overlap needs compute between the start and the wait, other than the one that writes the input.
    r.valid = std::any_of(program.begin() + static_cast<std::ptrdiff_t>(r.ready + 1),
                          program.begin() + static_cast<std::ptrdiff_t>(r.first_use),
                          [](const Instruction& in) { return std::holds_alternative<Compute>(in); });
    // A chain's collectives all start right after the writer: not where a send or receive stands between the
    // writer and the chain or between the chain and its reader, whose partner may wait on them (a layout
    // mixing collectives and transfers, as between layers of different tensor-parallel degrees).
    const auto transfers = [&](std::size_t from, std::size_t to) {
      return std::any_of(program.begin() + static_cast<std::ptrdiff_t>(from),
                         program.begin() + static_cast<std::ptrdiff_t>(std::max(from, to)), [](const Instruction& in) {
                           return std::holds_alternative<Send>(in) || std::holds_alternative<Recv>(in);
                         });
    };
    if (!r.scatters.empty() &&
        (transfers(r.ready + 1, r.places.front()) || transfers(r.places.back() + 1, r.first_use)))
      r.valid = false;
    if (!r.valid) continue;
    r.order = 1 + starts_after[r.ready];
    starts_after[r.ready] += 1 + static_cast<int>(r.scatters.size() + r.gathers.size());
  }
  return found;
}

// A chain shares its reduce-scatters' and all-gathers' tags with the chains of its sub-group's members and
// its all-reduce's with those across: a tag is started by all its members or by none, so a chain is started
// only where every collective it issues is issued by as many valid reductions as its group has members.
void keep_whole_chains(std::vector<std::vector<Reduction>>& reductions) {
  for (bool dropped = true; dropped;) {
    std::unordered_map<std::int64_t, std::size_t> valid_members;
    std::unordered_set<std::int64_t> blocked;
    for (const auto& on_device : reductions)
      for (const Reduction& r : on_device)
        for (std::int64_t t : r.tags()) {
          if (r.valid) ++valid_members[t];
          else blocked.insert(t);
        }
    const auto whole = [&](const Reduction& r) {
      std::size_t k = 0;
      const auto groups = r.groups();  // aligned with tags(): the all-reduce's, the scatters', the gathers'
      for (std::int64_t t : r.tags())
        if (blocked.contains(t) || valid_members[t] != groups[k++].size()) return false;
      return true;
    };
    dropped = false;
    for (auto& on_device : reductions)
      for (Reduction& r : on_device)
        if (r.valid && !whole(r)) {
          r.valid = false;
          dropped = true;
        }
  }
}

// The starts the valid reductions would issue, by device, and the tags of the blocking collectives they
// replace. A reduction's starts all stand right after its writer, `order` placing them among the others
// there; a chain's in the order its collectives run: reduce-scatters, the all-reduce, all-gathers.
struct PlannedStarts {
  std::unordered_set<std::int64_t> replaced;
  std::vector<std::vector<Issue>> by_device;
};

PlannedStarts planned_starts(const std::vector<std::vector<Reduction>>& reductions) {
  PlannedStarts planned{.replaced = {}, .by_device = std::vector<std::vector<Issue>>(reductions.size())};
  for (std::size_t d = 0; d < reductions.size(); ++d)
    for (const Reduction& r : reductions[d]) {
      if (!r.valid) continue;
      const auto issue = [&](int after, std::int64_t tag, std::vector<int> group) {
        planned.replaced.insert(tag);
        std::ranges::sort(group);
        planned.by_device[d].push_back(Issue{r.ready, after, tag, std::move(group)});
      };
      int after = r.order;
      for (const Collective& c : r.scatters) issue(after++, c.tag, c.group);
      issue(after++, r.tag, r.group);
      for (const Collective& c : r.gathers) issue(after++, c.tag, c.group);
    }
  return planned;
}

// Marks invalid each valid reduction that issues a collective to a group `broken` names or starts a tag on
// one of its cycles: gloo and NCCL would match the group's collectives wrongly, or the devices' start
// streams would wait on each other. Whether any was.
bool drop_broken(std::vector<std::vector<Reduction>>& reductions, const detail::BrokenOrders& broken) {
  bool dropped = false;
  for (auto& on_device : reductions)
    for (Reduction& r : on_device)
      if (r.valid &&
          (std::ranges::any_of(r.groups(), [&](const auto& g) { return broken.disordered_groups.contains(g); }) ||
           std::ranges::any_of(r.tags(), [&](std::int64_t t) { return broken.cyclic_starts.contains(t); }))) {
        r.valid = false;
        dropped = true;
      }
  return dropped;
}

// Until neither is left, drops the reductions of groups whose members would issue their collectives in
// different orders and those whose starts the devices would run in orders that wait on each other across
// groups (a chain's links in the pairs and across them: passes/program_edits.h, starts_on_cycles). A drop
// changes where the others' collectives stand (a dropped reduction stays blocking where it was) and may
// leave a chain started by some of its members only, so each round asks again on what is left.
void keep_ordered(const ExecPlan& exec, std::vector<std::vector<Reduction>>& reductions) {
  for (;;) {
    PlannedStarts planned = planned_starts(reductions);
    if (!drop_broken(reductions, detail::broken_orders(exec, planned.replaced, std::move(planned.by_device)))) return;
    keep_whole_chains(reductions);
  }
}

}  // namespace

int overlap_collectives(ExecPlan& exec) {
  if (exec.num_devices < 2) return 0;
  std::vector<std::vector<Reduction>> reductions(exec.programs.size());
  for (std::size_t d = 0; d < exec.programs.size(); ++d) reductions[d] = reductions_of(exec, exec.programs[d]);
  // Decided for all members at once: a tag every member overlaps, in groups whose members still issue
  // their collectives in one order once the starts (a chain's all of them) stand where they go.
  detail::keep_agreed_by_all_members(reductions);
  keep_whole_chains(reductions);
  keep_ordered(exec, reductions);
  std::unordered_set<std::int64_t> overlapped;
  for (std::size_t d = 0; d < exec.programs.size(); ++d) {
    auto& program = exec.programs[d];
    ProgramEdit edit;
    std::unordered_set<std::uint32_t> refreed;
    // What goes after one instruction goes in program order (insert_after keeps the order given).
    for (const Reduction& r : reductions[d]) {
      if (!r.valid) continue;
      // Each start keeps its collective's tag (and its CollectiveInfo): the blocking forms are gone. A chain's
      // starts each read the one before (chained starts), and its waits come in chain order before the reader.
      for (std::size_t place : r.places) edit.remove(place);
      std::vector<Instruction> at_use;
      const auto start = [&](const Collective& c) {
        edit.insert_after(r.ready, CollectiveStart{c.kind, c.group, c.tag, {c.input}, {c.output}});
        at_use.emplace_back(CollectiveWait{c.tag});
      };
      std::ranges::for_each(r.scatters, start);
      start(Collective{comm::Primitive::all_reduce, r.group, r.tag, r.input, r.output});
      std::ranges::for_each(r.gathers, start);
      for (Instruction& in : at_use)
        if (r.first_use < program.size()) edit.insert_before(r.first_use, std::move(in));
        else edit.insert_after(program.size() - 1, std::move(in));
      // Each of its buffers is freed after its last use where the reduction now stands.
      refreed.insert(r.scatters.empty() ? r.input.value : r.scatters.front().input.value);
      for (BufferId b : r.between) refreed.insert(b.value);
      overlapped.insert(r.tag);
    }
    if (!edit.empty()) std::move(edit).apply(program, {}, refreed);
  }
  return static_cast<int>(overlapped.size());
}

}  // namespace loom::exec
