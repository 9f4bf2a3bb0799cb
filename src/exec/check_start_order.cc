// The start-order half of check_exec_plan (check.h): a device runs its started collectives one after
// another, each once every member has reached it (the simulator's starts stream, as NCCL runs a CUDA
// stream's collectives), so devices that share two asynchronous collectives must start them in one
// order; else neither runs and each wait on them hangs. The progress pass takes a start as joining its
// collective at once and cannot see this, so the order is checked here: the graph of each device's
// consecutive starts must be acyclic (passes/program_edits.h, starts_on_cycles).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "check_internal.h"
#include "passes/program_edits.h"

namespace loom::exec::detail {

Expected<void> check_start_order(const ExecPlan& exec) {
  std::vector<std::vector<Issue>> starts = issued_starts(exec);
  if (std::ranges::all_of(starts, [](const auto& s) { return s.size() < 2; })) return {};
  const std::set<std::int64_t> cyclic = starts_on_cycles(starts);
  if (cyclic.empty()) return {};
  // Each device's consecutive starts among the cyclic ones: "device 1 starts #7 before #4".
  std::vector<std::string> clauses;
  std::map<std::pair<std::int64_t, std::int64_t>, int> first_device;  // an order pair -> a device taking it
  for (std::size_t d = 0; d < starts.size(); ++d) {
    std::int64_t previous = -1;
    for (const Issue& issue : starts[d]) {
      if (!cyclic.contains(issue.tag)) continue;
      if (previous >= 0 && previous != issue.tag) first_device.try_emplace({previous, issue.tag}, static_cast<int>(d));
      previous = issue.tag;
    }
  }
  for (const auto& [order, device] : first_device) {
    if (clauses.size() == 4) {
      clauses.push_back("...");
      break;
    }
    clauses.push_back(fmt::format("device {} starts #{} before #{}", device, order.first, order.second));
  }
  std::string tags;
  for (std::int64_t tag : cyclic) tags += fmt::format("{}#{}", tags.empty() ? "" : ", ", tag);
  return fail(fmt::format("deadlock: devices start asynchronous collectives {} in orders that wait on each other ({})",
                          tags, fmt::join(clauses, "; ")),
              "members of asynchronous collectives must start them in one relative order (a device runs its starts "
              "one after another); keep such collectives blocking or reorder their starts");
}

}  // namespace loom::exec::detail
