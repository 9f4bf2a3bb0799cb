// The group step's search (sharding_groups.h): the problem over groups, without usages, searched by the
// local search and then by the MILP.
#include "sharding_groups.h"
#include "sharding_local_search.h"
#include "sharding_milp.h"

namespace loom::search {

ShardingChoice group_search(const ShardingProblem& core, const NodeGroups& groups, const ShardingChoice& start,
                            std::uint64_t seed, const GroupSearchLimits& limits) {
  const ShardingProblem grouped = group_problem(core, groups);
  LocalSearch search(grouped, seed);
  search.start_from(restrict_to_groups(groups, start));
  LocalSearchLimits moves;
  moves.iterations = limits.iterations;
  moves.deadline = limits.deadline;
  search.run(moves, {});
  ShardingChoice best = search.best();
  double milp_seconds = 0;
  if (limits.milp_deadline)
    milp_seconds = std::chrono::duration<double>(*limits.milp_deadline - std::chrono::steady_clock::now()).count();
  if (limits.milp_max_cells > 0 && milp_cells(grouped) <= limits.milp_max_cells &&
      (!limits.milp_deadline || milp_seconds > 0)) {
    const MilpOutcome milp = solve_milp(grouped, &best, limits.milp_node_limit, milp_seconds);
    if (milp.choice) {
      auto milp_cost = evaluate_choice(grouped, *milp.choice);
      auto search_cost = evaluate_choice(grouped, best);
      if (milp_cost && (!search_cost || milp_cost->total < search_cost->total)) best = *milp.choice;
    }
  }
  return expand_groups(core, groups, best);
}

}  // namespace loom::search
