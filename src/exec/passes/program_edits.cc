#include "program_edits.h"

#include <algorithm>
#include <iterator>
#include <map>

#include "loom/exec/instruction_buffers.h"

namespace loom::exec::detail {

void ProgramEdit::apply(std::vector<Instruction>& program, const std::unordered_set<std::uint32_t>& dropped,
                        const std::unordered_set<std::uint32_t>& refreed) && {
  std::vector<Instruction> edited;
  edited.reserve(program.size() + before_.size() + after_.size());
  std::unordered_set<std::uint32_t> was_freed;  // refreed buffers whose Free was taken out
  const auto emit_all = [&](auto& map, std::size_t i) {
    if (const auto it = map.find(i); it != map.end())
      for (Instruction& in : it->second) edited.push_back(std::move(in));
  };
  for (std::size_t i = 0; i < program.size(); ++i) {
    emit_all(before_, i);
    if (const auto it = replaced_.find(i); it != replaced_.end()) {
      edited.push_back(std::move(it->second));
    } else if (!removed_.contains(i)) {
      const auto* free = std::get_if<Free>(&program[i]);
      if (free != nullptr && dropped.contains(free->buffer.value)) {
        // the buffer is gone with its transfer
      } else if (free != nullptr && refreed.contains(free->buffer.value)) {
        was_freed.insert(free->buffer.value);
      } else {
        edited.push_back(std::move(program[i]));
      }
    }
    emit_all(after_, i);
  }
  if (was_freed.empty()) {
    program = std::move(edited);
    return;
  }
  std::unordered_map<std::uint32_t, std::size_t> last;
  std::unordered_map<std::int64_t, const CollectiveStart*> started;  // by tag: a wait uses its start's outputs
  for (std::size_t i = 0; i < edited.size(); ++i) {
    const auto use = [&](BufferId b) {
      if (was_freed.contains(b.value)) last[b.value] = i;
    };
    for_each_written(edited[i], use);
    for_each_read(edited[i], use);
    if (const auto* start = std::get_if<CollectiveStart>(&edited[i])) started[start->tag] = start;
    if (const auto* wait = std::get_if<CollectiveWait>(&edited[i]))
      if (const auto it = started.find(wait->tag); it != started.end()) std::ranges::for_each(it->second->outputs, use);
  }
  std::map<std::size_t, std::vector<std::uint32_t>> frees;  // position -> buffers freed after it
  for (const auto& [buffer, at] : last) frees[at].push_back(buffer);
  program.clear();
  program.reserve(edited.size() + last.size());
  for (std::size_t i = 0; i < edited.size(); ++i) {
    program.push_back(std::move(edited[i]));
    if (const auto it = frees.find(i); it != frees.end()) {
      std::ranges::sort(it->second);
      for (std::uint32_t b : it->second) program.push_back(Free{BufferId(b)});
    }
  }
}

void drop_unwritten_buffers(ExecPlan& exec) {
  std::vector<char> written(exec.buffers.size(), 0);
  for (const auto& program : exec.programs)
    for (const Instruction& in : program) for_each_written(in, [&](BufferId b) { written[b.index()] = 1; });
  if (std::ranges::all_of(written, [](char w) { return w != 0; })) return;
  std::vector<BufferId> renamed(exec.buffers.size());
  std::vector<Buffer> kept;
  kept.reserve(exec.buffers.size());
  for (std::size_t b = 0; b < exec.buffers.size(); ++b) {
    if (written[b] == 0) continue;
    renamed[b] = BufferId(static_cast<std::uint32_t>(kept.size()));
    kept.push_back(std::move(exec.buffers[b]));
  }
  exec.buffers = std::move(kept);
  const auto rename = [&](BufferId& b) {
    if (b.valid()) b = renamed[b.index()];
  };
  const auto rename_all = [&](std::vector<BufferId>& ids) {
    for (BufferId& b : ids) rename(b);
  };
  for (auto& program : exec.programs)
    for (Instruction& instruction : program)
      std::visit(
          [&](auto& in) {
            using T = std::decay_t<decltype(in)>;
            if constexpr (std::is_same_v<T, Compute> || std::is_same_v<T, CollectiveStart>) {
              rename_all(in.inputs);
              rename_all(in.outputs);
            } else if constexpr (std::is_same_v<T, Local>) {
              rename_all(in.inputs);
              rename(in.output);
            } else if constexpr (std::is_same_v<T, Collective>) {
              rename(in.input);
              rename(in.output);
            } else if constexpr (std::is_same_v<T, Load>) {
              rename(in.output);
            } else if constexpr (std::is_same_v<T, Send> || std::is_same_v<T, Recv> || std::is_same_v<T, Free>) {
              rename(in.buffer);
            }
          },
          instruction);
}

std::set<std::vector<int>> groups_out_of_order(std::vector<std::vector<Issue>> by_device) {
  // Per device, per group: its tags in issue order.
  std::vector<std::map<std::vector<int>, std::vector<std::int64_t>>> order(by_device.size());
  for (std::size_t d = 0; d < by_device.size(); ++d) {
    std::ranges::sort(by_device[d]);
    for (const Issue& issue : by_device[d]) order[d][issue.group].push_back(issue.tag);
  }
  std::set<std::vector<int>> out;
  for (std::size_t d = 0; d < order.size(); ++d)
    for (const auto& [group, tags] : order[d])
      for (int member : group) {
        const auto& theirs = order[static_cast<std::size_t>(member)];
        const auto it = theirs.find(group);
        if (it == theirs.end() || it->second != tags) out.insert(group);
      }
  return out;
}

std::vector<std::vector<Issue>> issued_collectives(const ExecPlan& exec) {
  std::vector<std::vector<Issue>> by_device(exec.programs.size());
  for (std::size_t d = 0; d < exec.programs.size(); ++d) {
    const auto& program = exec.programs[d];
    for (std::size_t i = 0; i < program.size(); ++i)
      if (const auto c = collective_call(program[i])) {
        std::vector<int> group(c->group.begin(), c->group.end());
        std::ranges::sort(group);
        by_device[d].push_back(Issue{i, 0, c->tag, std::move(group)});
      }
  }
  return by_device;
}

std::vector<std::vector<Issue>> issued_starts(const ExecPlan& exec) {
  std::vector<std::vector<Issue>> by_device(exec.programs.size());
  for (std::size_t d = 0; d < exec.programs.size(); ++d) {
    const auto& program = exec.programs[d];
    for (std::size_t i = 0; i < program.size(); ++i)
      if (const auto* s = std::get_if<CollectiveStart>(&program[i])) {
        std::vector<int> group(s->group.begin(), s->group.end());
        std::ranges::sort(group);
        by_device[d].push_back(Issue{i, 0, s->tag, std::move(group)});
      }
  }
  return by_device;
}

std::set<std::int64_t> starts_on_cycles(std::vector<std::vector<Issue>> starts_by_device) {
  // Nodes: the tags; edges: each device's consecutive starts. Kosaraju's two passes, iteratively.
  std::map<std::int64_t, std::size_t> node;
  std::vector<std::int64_t> tag_of;
  std::vector<std::set<std::size_t>> next, previous;
  const auto id = [&](std::int64_t tag) {
    const auto [it, fresh] = node.try_emplace(tag, tag_of.size());
    if (fresh) {
      tag_of.push_back(tag);
      next.emplace_back();
      previous.emplace_back();
    }
    return it->second;
  };
  for (auto& starts : starts_by_device) {
    std::ranges::sort(starts);
    for (std::size_t k = 0; k < starts.size(); ++k) {
      const std::size_t here = id(starts[k].tag);
      if (k == 0) continue;
      const std::size_t before = id(starts[k - 1].tag);
      if (before == here) continue;
      next[before].insert(here);
      previous[here].insert(before);
    }
  }
  const std::size_t n = tag_of.size();
  std::vector<std::size_t> finished;  // by finishing time, along `next`
  std::vector<char> seen(n, 0);
  for (std::size_t root = 0; root < n; ++root) {
    if (seen[root] != 0) continue;
    std::vector<std::pair<std::size_t, std::set<std::size_t>::const_iterator>> stack{{root, next[root].begin()}};
    seen[root] = 1;
    while (!stack.empty()) {
      auto& [v, it] = stack.back();
      if (it == next[v].end()) {
        finished.push_back(v);
        stack.pop_back();
        continue;
      }
      const std::size_t w = *it++;
      if (seen[w] == 0) {
        seen[w] = 1;
        stack.emplace_back(w, next[w].begin());
      }
    }
  }
  std::vector<std::size_t> component(n, n);
  std::vector<std::size_t> size;
  for (std::size_t k = n; k-- > 0;) {
    const std::size_t root = finished[k];
    if (component[root] != n) continue;
    const std::size_t c = size.size();
    size.push_back(0);
    std::vector<std::size_t> todo{root};
    component[root] = c;
    while (!todo.empty()) {
      const std::size_t v = todo.back();
      todo.pop_back();
      ++size[c];
      for (std::size_t w : previous[v])
        if (component[w] == n) {
          component[w] = c;
          todo.push_back(w);
        }
    }
  }
  std::set<std::int64_t> out;
  for (std::size_t v = 0; v < n; ++v)
    if (size[component[v]] > 1) out.insert(tag_of[v]);
  return out;
}

BrokenOrders broken_orders(const ExecPlan& exec, const std::unordered_set<std::int64_t>& replaced,
                           std::vector<std::vector<Issue>> started) {
  std::vector<std::vector<Issue>> starts = issued_starts(exec);
  for (std::size_t d = 0; d < starts.size() && d < started.size(); ++d)
    starts[d].insert(starts[d].end(), started[d].begin(), started[d].end());
  return {.disordered_groups = groups_out_of_order_after(exec, replaced, std::move(started)),
          .cyclic_starts = starts_on_cycles(std::move(starts))};
}

std::set<std::vector<int>> groups_out_of_order_after(const ExecPlan& exec, const std::unordered_set<std::int64_t>& replaced,
                                                     std::vector<std::vector<Issue>> started) {
  std::vector<std::vector<Issue>> issues = issued_collectives(exec);
  for (std::size_t d = 0; d < issues.size(); ++d) {
    std::erase_if(issues[d], [&](const Issue& issue) { return replaced.contains(issue.tag); });
    if (d < started.size()) std::ranges::move(started[d], std::back_inserter(issues[d]));
  }
  return groups_out_of_order(std::move(issues));
}

}  // namespace loom::exec::detail
