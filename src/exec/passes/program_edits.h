// Private to the exec passes (exec/passes.h): the edits they make to programs, and the check that
// every group's members still issue their collectives in one order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "loom/exec/exec_plan.h"
#include "loom/exec/instruction_buffers.h"

namespace loom::exec::detail {

// Edits of one program, applied at once so that positions name the program as it was: instructions
// removed or replaced, and instructions inserted before or after a position (in the order given).
class ProgramEdit {
 public:
  void remove(std::size_t i) { removed_.insert(i); }
  void replace(std::size_t i, Instruction in) { replaced_.insert_or_assign(i, std::move(in)); }
  void insert_before(std::size_t i, Instruction in) { before_[i].push_back(std::move(in)); }
  void insert_after(std::size_t i, Instruction in) { after_[i].push_back(std::move(in)); }
  bool empty() const { return removed_.empty() && replaced_.empty() && before_.empty() && after_.empty(); }

  // Also drops the Free of every buffer in `dropped`, and moves the Free of every buffer in `refreed`
  // right after the buffer's last use in the edited program.
  void apply(std::vector<Instruction>& program, const std::unordered_set<std::uint32_t>& dropped,
             const std::unordered_set<std::uint32_t>& refreed) &&;

 private:
  std::set<std::size_t> removed_;
  std::unordered_map<std::size_t, Instruction> replaced_;
  std::unordered_map<std::size_t, std::vector<Instruction>> before_, after_;
};

// Removes the buffers no instruction writes any more (those of dropped transfers), renumbering the rest
// in order, so every buffer keeps exactly one writer.
void drop_unwritten_buffers(ExecPlan& exec);

// A blocking all-reduce of a program that a pass may make asynchronous: `ready`, the last instruction
// before it writing its input (of those `compute_writers_only` admits); `place`, the all-reduce; and
// `first_use`, the first instruction after it reading or freeing its output (the program's size if none).
struct BlockingAllReduce {
  std::size_t ready = 0, place = 0, first_use = 0;
  const Collective* collective = nullptr;
};

// The group step (CollectiveInfo::step) every member's collective is one group of, for the start that
// replaces them: the other groups' starts of the same members run beside it and share the NICs as the
// collectives did. -1 when the members' steps differ or they have none.
template <class Member>
std::int64_t shared_step(const ExecPlan& exec, const std::vector<const Member*>& members) {
  const auto step_of = [&](const Member* m) {
    const auto tag = static_cast<std::size_t>(m->tag);
    return m->tag >= 0 && tag < exec.collectives.size() ? exec.collectives[tag].step : -1;
  };
  if (members.empty()) return -1;
  const std::int64_t step = step_of(members.front());
  return std::ranges::all_of(members, [&](const Member* m) { return step_of(m) == step; }) ? step : -1;
}

// The tag of the start named `name` (the name its members' units of the same collectives share) replacing the
// collectives of `members` (each with `tag` and `output`): added to `exec` where the first member asks, its
// CollectiveInfo naming the first member's tensor, describe(member count, bytes) and the members' shared step,
// then looked up in `tag_of` (name -> tag). Second: whether this call added it.
template <class Member, class Describe>
std::pair<std::int64_t, bool> start_tag(ExecPlan& exec, std::map<std::int64_t, std::int64_t>& tag_of, std::int64_t name,
                                        const std::vector<const Member*>& members, Describe&& describe) {
  const auto [it, added] = tag_of.try_emplace(name, 0);
  if (added) {
    std::int64_t bytes = 0;
    for (const Member* m : members) bytes += exec.buffer(m->output).bytes;
    it->second = exec.add_tag(CollectiveInfo{.tensor = exec.buffer(members.front()->output).piece.tensor,
                                             .rule = describe(members.size(), bytes),
                                             .paired = -1,
                                             .step = shared_step(exec, members)});
  }
  return {it->second, added};
}

// The program's blocking all-reduces over 2 or more members that `wanted` accepts and whose input an
// instruction of the program writes (a Compute, with `compute_writers_only`), in program order.
template <class Wanted>
std::vector<BlockingAllReduce> blocking_all_reduces(const std::vector<Instruction>& program, Wanted&& wanted,
                                                    bool compute_writers_only);

// A collective one device issues, at a position of its program as edited: `position` is the index in
// the unedited program, `after` orders what is issued after that instruction behind what replaces it.
struct Issue {
  std::size_t position = 0;
  int after = 0;
  std::int64_t tag = 0;
  std::vector<int> group;  // ascending

  auto operator<=>(const Issue&) const = default;
};

// The groups (ascending members) whose members do not issue their collectives, by tag, in one order:
// gloo and NCCL match a group's collectives by that order. `by_device` need not be sorted.
std::set<std::vector<int>> groups_out_of_order(std::vector<std::vector<Issue>> by_device);

// Every device's collectives (blocking or started) as issued where the program has them.
std::vector<std::vector<Issue>> issued_collectives(const ExecPlan& exec);

// The groups out of order (as groups_out_of_order) once every device's collectives of the `replaced`
// tags give way to its `started` ones (by device; a start's tag is a name its members share).
std::set<std::vector<int>> groups_out_of_order_after(const ExecPlan& exec, const std::unordered_set<std::int64_t>& replaced,
                                                     std::vector<std::vector<Issue>> started);

// The starts (by tag) that lie on a cycle of the order the devices issue their starts in. A device runs its
// started collectives one after another (the simulator's starts stream, as NCCL runs the collectives of a
// CUDA stream), each once every member has reached it: where device a starts X before Y and device b, a
// member of both, Y before X, neither ever runs. An order holds when the graph of each device's
// consecutive starts (by device, an Issue per start; its tag is the name its members share) is acyclic.
std::set<std::int64_t> starts_on_cycles(std::vector<std::vector<Issue>> starts_by_device);

// Every device's asynchronous starts as the program has them.
std::vector<std::vector<Issue>> issued_starts(const ExecPlan& exec);

// The orders a pass's starts would break, once every device's collectives of the `replaced` tags give way
// to its `started` ones (by device): the groups whose members would issue their collectives in different
// orders (groups_out_of_order_after) and the starts, the pass's and those the programs hold already, that
// the devices would run in orders that wait on each other (starts_on_cycles). A pass drops what names one
// and asks again, until nothing is broken.
struct BrokenOrders {
  std::set<std::vector<int>> disordered_groups;  // ascending members
  std::set<std::int64_t> cyclic_starts;          // by tag (a start's: the name its members share)
};
BrokenOrders broken_orders(const ExecPlan& exec, const std::unordered_set<std::int64_t>& replaced,
                           std::vector<std::vector<Issue>> started);

// A pass rewrites a collective only where every member of its group does: marks invalid each candidate
// (by device; with `tag`, `group` and `valid`) whose tag not every member of its group holds valid.
template <class Candidate>
void keep_agreed_by_all_members(std::vector<std::vector<Candidate>>& by_device) {
  std::unordered_map<std::int64_t, std::size_t> valid_members;
  for (const auto& candidates : by_device)
    for (const Candidate& c : candidates)
      if (c.valid) ++valid_members[c.tag];
  for (auto& candidates : by_device)
    for (Candidate& c : candidates)
      if (c.valid && valid_members[c.tag] != c.group.size()) c.valid = false;
}

// The start of an asynchronous collective replacing the blocking ones of `members` (each with its input,
// output, group and `place`, the position of the instruction it replaces, which `edit` removes).
template <class Member>
CollectiveStart start_replacing(comm::Primitive kind, std::int64_t tag, const std::vector<const Member*>& members,
                                ProgramEdit& edit) {
  CollectiveStart start{kind, members.front()->group, tag, {}, {}};
  for (const Member* m : members) {
    start.inputs.push_back(m->input);
    start.outputs.push_back(m->output);
    edit.remove(m->place);
  }
  return start;
}

template <class Wanted>
std::vector<BlockingAllReduce> blocking_all_reduces(const std::vector<Instruction>& program, Wanted&& wanted,
                                                    bool compute_writers_only) {
  std::unordered_map<std::uint32_t, std::size_t> writer;     // buffer -> the instruction writing it
  std::unordered_map<std::uint32_t, std::size_t> output_of;  // output not yet used -> its all-reduce
  std::vector<BlockingAllReduce> found;
  for (std::size_t i = 0; i < program.size(); ++i) {
    const auto use = [&](BufferId b) {
      if (const auto it = output_of.find(b.value); it != output_of.end()) {
        found[it->second].first_use = i;
        output_of.erase(it);
      }
    };
    for_each_read(program[i], use);
    if (const auto* f = std::get_if<Free>(&program[i])) use(f->buffer);
    if (const auto* c = std::get_if<Collective>(&program[i]);
        c != nullptr && c->kind == comm::Primitive::all_reduce && c->group.size() >= 2 && wanted(*c)) {
      if (const auto w = writer.find(c->input.value); w != writer.end()) {
        output_of.emplace(c->output.value, found.size());
        found.push_back({.ready = w->second, .place = i, .first_use = program.size(), .collective = c});
      }
    }
    if (!compute_writers_only || std::holds_alternative<Compute>(program[i]))
      for_each_written(program[i], [&](BufferId b) { writer[b.value] = i; });
  }
  return found;
}

}  // namespace loom::exec::detail
