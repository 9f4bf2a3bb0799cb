#include "concurrent_steps.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>

namespace loom::exec::detail {

std::int64_t ConcurrentSteps::begin_search(std::vector<int> devices) {
  if (current_ < 0) return -1;
  std::ranges::sort(devices);
  const auto [end, last] = std::ranges::unique(devices);
  devices.erase(end, last);
  searches_.push_back({current_, std::move(devices)});
  return static_cast<std::int64_t>(searches_.size() - 1);
}

void ConcurrentSteps::lowered(std::int64_t search, std::size_t index, comm::Primitive primitive,
                              const std::vector<std::vector<int>>& groups, std::vector<std::int64_t> tags) {
  if (search < 0) return;
  lowered_.push_back({search, index, primitive, groups, std::move(tags)});
}

void ConcurrentSteps::share(ExecPlan& exec,
                            const std::function<std::int64_t(const std::vector<std::vector<int>>&)>& group_step) const {
  // Each set's searches in order, into runs of pairwise disjoint devices: a search joins the first run of
  // its set it shares no device with.
  struct Run {
    std::vector<int> devices;  // ascending
    std::int64_t number = 0;
  };
  std::map<std::int64_t, std::vector<Run>> runs;  // by set
  std::vector<std::int64_t> run_of;               // by search
  std::int64_t numbered = 0;
  for (const Search& search : searches_) {
    std::vector<Run>& set_runs = runs[search.set];
    const auto disjoint = [&](const Run& run) {
      std::vector<int> common;
      std::ranges::set_intersection(run.devices, search.devices, std::back_inserter(common));
      return common.empty();
    };
    auto run = std::ranges::find_if(set_runs, disjoint);
    if (run == set_runs.end()) run = set_runs.insert(set_runs.end(), Run{{}, numbered++});
    std::vector<int> merged;
    std::ranges::set_union(run->devices, search.devices, std::back_inserter(merged));
    run->devices = std::move(merged);
    run_of.push_back(run->number);
  }
  // The steps of one run with one index and primitive (each from another search): joined where there
  // are two or more.
  std::map<std::tuple<std::int64_t, std::size_t, comm::Primitive>, std::vector<const Lowered*>> joined;
  for (const Lowered& l : lowered_) joined[{run_of[static_cast<std::size_t>(l.search)], l.index, l.primitive}].push_back(&l);
  for (const auto& [key, steps] : joined) {
    if (steps.size() < 2) continue;
    std::vector<std::vector<int>> groups;
    for (const Lowered* l : steps) groups.insert(groups.end(), l->groups.begin(), l->groups.end());
    const std::int64_t step = group_step(groups);
    for (const Lowered* l : steps)
      for (std::int64_t tag : l->tags) exec.collectives[static_cast<std::size_t>(tag)].step = step;
  }
}

}  // namespace loom::exec::detail
