#include "loom/search/sharding_solver.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "sharding_groups.h"
#include "sharding_lagrangian.h"
#include "sharding_local_search.h"
#include "sharding_milp.h"
#include "sharding_presolve.h"
#include "sharding_repair.h"
#include "sharding_stage_clock.h"

namespace loom::search {
namespace {

constexpr std::int64_t kDefaultIterations = 20'000;
// A problem small enough for the MILP gets this share of the budget for the local search's incumbent.
constexpr double kIncumbentShare = 0.2;
constexpr std::int64_t kIncumbentIterations = 5'000;
// The share of the budget for removing the start's near-forbidden costs.
constexpr double kMarkerShare = 0.15;
// The share of the budget (from the start) after which the Lagrangian search stops.
constexpr double kLagrangianShare = 0.7;
// The group step runs when the groups are at most this share of the free nodes (V: more than half, 342
// groups; at 0.5 it ran without them at 7.3 x the contest's best, with them 1.85 x); its tree moves
// end at the first share of the budget, its MILP gets the second share.
constexpr double kGroupShrink = 0.9;
constexpr double kGroupMovesShare = 0.05;
constexpr double kGroupMilpShare = 0.15;
constexpr std::int64_t kGroupIterations = 2'000;
// The start's descended groups replace the repaired group choice when they cost less than this share of it:
// the repaired one, from the group problem's optimum, leads the Lagrangian rounds to better ends where the
// two are close (K at 60 s: 1.105 x the contest's best from it, 1.222 from the start's at 0.94 of its
// cost); C's is 0.59 of it (10 s: 1.609 -> 1.353).
constexpr double kStartDescentShare = 0.75;

using Clock = StageClock::Clock;

std::string cost_text(WideCost cost) {
  return cost > WideCost{kForbidden} ? std::string("over 2^63") : fmt::format("{}", static_cast<std::int64_t>(cost));
}

struct SearchOutcome {
  ShardingChoice best;
  WideCost cost = 0;
  bool forbidden = true;
  std::int64_t iterations = 0;
};

// The feasibility-first problem: near-forbidden costs stay, every other cost becomes the strategy's
// usage, so a search on it removes near-forbidden choices while keeping usage least.
ShardingProblem marker_problem(const ShardingProblem& core) {
  ShardingProblem out = core;
  for (ShardingNode& node : out.nodes)
    for (std::size_t s = 0; s < node.costs.size(); ++s)
      if (node.costs[s] < kNearForbidden) node.costs[s] = node.start < node.end ? node.usages[s] : 0;
  for (ShardingEdge& edge : out.edges)
    for (std::int64_t& c : edge.costs)
      if (c < kNearForbidden) c = 0;
  return out;
}

bool has_near_forbidden(const ShardingProblem& core, const ShardingChoice& choice) {
  for (std::size_t i = 0; i < core.nodes.size(); ++i)
    if (core.nodes[i].costs[static_cast<std::size_t>(choice.strategies[i])] >= kNearForbidden) return true;
  return std::ranges::any_of(core.edges,
                             [&](const ShardingEdge& edge) { return edge_cost(core, edge, choice) >= kNearForbidden; });
}

// The group step (sharding_groups.h): the problem over groups of tied nodes searched and solved as
// units; its choice, repaired under the limit when over it, replaces the start when it costs less.
// Groups worth searching as units (sharding_groups.h): none when they barely shrink the problem.
std::optional<NodeGroups> worthwhile_groups(const ShardingProblem& core) {
  NodeGroups groups = group_nodes(core);
  std::size_t free_nodes = 0;
  for (const ShardingNode& node : core.nodes) free_nodes += node.costs.size() > 1;
  if (groups.count() == 0 || static_cast<double>(groups.count()) > kGroupShrink * static_cast<double>(free_nodes))
    return std::nullopt;
  return groups;
}

// The group step: the problem over groups searched and solved as units; its choice, repaired under the
// limit when over it (group by group, else node by node), replaces the start when it costs less.
// Records the stages "groups" (the group choice's cost, the limit not looked at), "group repair" (its
// cost under the limit, when it was over it; the start's when the repair failed), "group descent"
// (after the group moves that lower the cost within the limit) and "start descent" (the start's groups
// after the same moves, when they fit; the cheaper of the two descents goes on).
void start_from_groups(const ShardingProblem& core, const NodeGroups& groups, ShardingChoice& start,
                       const SolveOptions& options, StageClock& clock) {
  GroupSearchLimits limits;
  limits.milp_max_cells = options.milp_max_cells;
  limits.milp_node_limit = options.milp_node_limit;
  if (clock.deadline()) {
    // Its shares count from its own start, not the solve's: reading and presolving D take 2-3 s of a
    // 10 s budget on a busy box, and shares from the solve's start left its MILP no time at all (D
    // 1.007 -> 1.754 x the contest's best). The solve's deadline still bounds both.
    limits.deadline = clock.share_from_now(kGroupMovesShare);
    limits.milp_deadline = clock.share_from_now(kGroupMovesShare + kGroupMilpShare);
  } else {
    limits.iterations = options.iterations > 0 ? std::min(options.iterations, kGroupIterations) : kGroupIterations;
  }
  ShardingChoice grouped = group_search(core, groups, start, options.seed, limits);
  clock.record("groups", limits.milp_deadline, choice_cost_sum(core, grouped));
  if (clock.expired()) {  // no time for the repair: the start stays
    clock.skip("group repair");
    clock.skip("group descent");
    clock.skip("start descent");
    return;
  }
  const ShardingProblem grouped_problem = group_problem(core, groups);
  ShardingChoice by_groups = restrict_to_groups(groups, grouped);
  bool by_group_moves = true;  // `grouped` is by_groups expanded
  LocalSearch candidate(core, options.seed);
  if (!candidate.start_from(grouped)) {
    if (repair_group_usage(core, groups, grouped_problem, by_groups)) {
      grouped = expand_groups(core, groups, by_groups);
    } else {
      by_group_moves = false;
      if (!repair_usage(core, grouped)) grouped = start;  // the start fits
    }
    if (!candidate.start_from(grouped)) return;
    clock.record("group repair", limits.milp_deadline, choice_cost_sum(core, grouped));
  }
  if (clock.expired()) {
    clock.skip("group descent");
  } else {
    if (by_group_moves && improve_groups_within_limit(core, groups, grouped_problem, by_groups) > 0) {
      grouped = expand_groups(core, groups, by_groups);
      candidate.start_from(grouped);
    }
    clock.record("group descent", limits.milp_deadline, choice_cost_sum(core, grouped));
  }
  // The start's own groups descended the same way, when they fit: the repair of a group choice far over
  // the limit overshoots, and the start's groups, under it already, may descend further (C at 10 s:
  // 121e9 against the repaired choice's 206e9). They go on only when clearly cheaper (kStartDescentShare).
  ShardingChoice start_groups = restrict_to_groups(groups, start);
  ShardingChoice descended = expand_groups(core, groups, start_groups);
  if (clock.expired()) {
    clock.skip("start descent");
  } else if (evaluate_choice(core, descended).has_value()) {
    if (improve_groups_within_limit(core, groups, grouped_problem, start_groups) > 0)
      descended = expand_groups(core, groups, start_groups);
    const std::int64_t cost = choice_cost_sum(core, descended);
    clock.record("start descent", limits.milp_deadline, cost);
    if (static_cast<double>(cost) < kStartDescentShare * static_cast<double>(choice_cost_sum(core, grouped)) &&
        candidate.start_from(descended))
      grouped = std::move(descended);
  }
  LocalSearch present(core, options.seed);
  present.start_from(start);
  if (candidate.current_cost() < present.current_cost()) start = grouped;
}

// `clock`, when given (the first search's only: the clock is not shared between threads), records the
// stage "lagrangian" (its passes' best choice, from which the local search goes on).
SearchOutcome local_search(const ShardingProblem& core, const ShardingChoice& start, std::uint64_t seed,
                           const LocalSearchLimits& limits, const LagrangianLimits* lagrangian, ProgressLine* progress,
                           StageClock* clock = nullptr) {
  LocalSearch search(core, seed);
  std::int64_t lagrangian_moves = 0;
  if (lagrangian) {
    if (progress) progress->update(Progress{"lagrangian", 0, lagrangian->rounds, ""});
    LagrangianOutcome priced = lagrangian_passes(core, start, seed, *lagrangian);
    lagrangian_moves = priced.iterations;
    search.start_from(priced.best);
    // Not when the solve's deadline has passed: the search after it is then the stage that met it.
    if (clock && !clock->expired()) clock->record("lagrangian", lagrangian->deadline, choice_cost_sum(core, priced.best));
  } else {
    search.start_from(start);
  }
  std::function<void(std::int64_t, WideCost)> report;
  if (progress)
    report = [&](std::int64_t done, WideCost best) {
      progress->update(Progress{"local search", done, limits.iterations, "cost " + cost_text(best)});
    };
  search.run(limits, report);
  return SearchOutcome{search.best(), search.best_cost(), search.best_forbidden(), search.iterations() + lagrangian_moves};
}

}  // namespace

Expected<ShardingResult> solve_sharding(const ShardingProblem& problem, const SolveOptions& options) {
  LOOM_RETURN_IF_ERROR(check_problem(problem));
  StageClock clock(options);
  LOOM_ASSIGN_OR_RETURN(Presolved presolved, presolve(problem));
  clock.record("presolve", std::nullopt, std::nullopt);
  const ShardingProblem& core = presolved.core;
  ShardingResult result;
  result.free_nodes = presolved.free_nodes;
  result.nodes_eliminated = presolved.nodes_eliminated;
  result.strategies_dropped = presolved.strategies_dropped;

  // The least-usage start, first without near-forbidden strategies; if even the plain one overflows,
  // no choice fits.
  // Starts, best first: the consistent one, least usage without near-forbidden strategies, least usage.
  // If even the last overflows, no choice fits.
  ShardingChoice start = LocalSearch::consistent_start(core);
  if (!LocalSearch(core, options.seed).start_from(start)) start = LocalSearch::least_usage(core, kNearForbidden);
  if (!LocalSearch(core, options.seed).start_from(start)) {
    start = LocalSearch::least_usage(core);
    LocalSearch least(core, options.seed);
    if (!least.start_from(start))
      return fail(fmt::format("{}: no choice fits the usage limit of {}: even with every node at its least usage "
                              "the peak is {}",
                              problem.name.empty() ? "the problem" : fmt::format("problem '{}'", problem.name),
                              problem.usage_limit, least.peak()),
                  "raise usage_limit or give the nodes strategies of smaller usage");
  }
  clock.record("start", std::nullopt, choice_cost_sum(core, start));

  // A problem small enough for the MILP: the local search only finds its incumbent.
  const bool use_milp = options.milp_max_cells > 0 && milp_cells(core) <= options.milp_max_cells;
  const std::optional<Clock::time_point> deadline = clock.deadline();
  LocalSearchLimits limits;
  limits.iterations = options.iterations;
  limits.deadline = deadline;
  if (limits.iterations == 0 && !limits.deadline) limits.iterations = kDefaultIterations;
  if (use_milp) {
    if (limits.iterations > 0) limits.iterations = std::min(limits.iterations, kIncumbentIterations);
    if (deadline) limits.deadline = clock.at_share(kIncumbentShare);
  }

  // Feasibility first: when the start pays near-forbidden costs, a share of the budget removes them.
  if (has_near_forbidden(core, start)) {
    const ShardingProblem markers = marker_problem(core);
    LocalSearchLimits first = limits;
    if (first.iterations > 0) first.iterations = std::max<std::int64_t>(1, first.iterations / 4);
    if (deadline) first.deadline = clock.at_share(kMarkerShare);
    // Done once no near-forbidden cost is left (the rest of its share only lowered the summed usage, a
    // proxy: A, C, D, K, L, P, Q spent all 15 % of the budget here at 60 s).
    first.stop_below = kNearForbidden;
    start = local_search(markers, start, options.seed, first, nullptr, options.progress).best;
    clock.record("feasibility", first.deadline, choice_cost_sum(core, start));
  }

  if (options.progress) options.progress->update(Progress{"groups", 0, 0, ""});
  // The group step not before the MILP: it solves the whole problem, and a start from groups (less time
  // for the local search's incumbent) left B's MILP 54 x the optimum at 10 s. The Lagrangian rounds of
  // the search beside the MILP use the groups (B at 10 s, its LP unfinished on a loaded box: 26 x the
  // contest's best without them, 9.9 x with).
  const std::optional<NodeGroups> groups = worthwhile_groups(core);
  if (groups && !use_milp) {
    start_from_groups(core, *groups, start, options, clock);
  }

  // With a usage limit, each search first runs the Lagrangian search, which trades usage at the peak.
  std::optional<LagrangianLimits> lagrangian;
  if (options.lagrangian_rounds > 0 && core.usage_limit != kForbidden) {
    lagrangian.emplace();
    lagrangian->rounds = options.lagrangian_rounds;
    if (groups) lagrangian->groups = &*groups;
    if (deadline) lagrangian->deadline = clock.at_share(kLagrangianShare);
  }
  // On the MILP path the first search only finds the MILP's incumbent (its Lagrangian rounds end with it),
  // and the MILP then runs to the deadline while the other searches run to it beside (both cores busy: the
  // MILP's LP is one thread).
  std::optional<LagrangianLimits> incumbent_lagrangian = lagrangian;
  if (incumbent_lagrangian && use_milp) {
    incumbent_lagrangian->groups = nullptr;  // the incumbent's few rounds on the nodes
    if (limits.deadline) incumbent_lagrangian->deadline = limits.deadline;
  }
  LocalSearchLimits beside = limits;
  if (use_milp && deadline) beside.deadline = deadline;
  const LagrangianLimits* priced = lagrangian ? &*lagrangian : nullptr;
  const LagrangianLimits* priced_first = incumbent_lagrangian ? &*incumbent_lagrangian : nullptr;
  // Independent searches side by side (seed + t), the best kept; ties go to the lower seed.
  const int threads = std::max(1, options.threads);
  std::vector<SearchOutcome> outcomes(static_cast<std::size_t>(threads));
  std::optional<MilpOutcome> milp;
  {
    std::vector<std::jthread> workers;
    for (int t = 1; t < threads; ++t)
      workers.emplace_back([&, t] {
        outcomes[static_cast<std::size_t>(t)] =
            local_search(core, start, options.seed + static_cast<std::uint64_t>(t), beside, priced, nullptr);
      });
    outcomes[0] = local_search(core, start, options.seed, limits, priced_first, options.progress, &clock);
    clock.record("search", limits.deadline,
                 outcomes[0].forbidden ? std::nullopt : std::optional<std::int64_t>(choice_cost_sum(core, outcomes[0].best)));
    // Under a deadline the MILP gets the time left, none when none is: it stops at the solve's deadline.
    const double milp_seconds = deadline ? std::chrono::duration<double>(*deadline - Clock::now()).count() : 0;
    if (use_milp && deadline && milp_seconds <= 0) clock.skip("milp");
    if (use_milp && (!deadline || milp_seconds > 0)) {
      if (options.progress) options.progress->update(Progress{"milp", 0, 0, "cost " + cost_text(outcomes[0].cost)});
      milp = solve_milp(core, outcomes[0].forbidden ? nullptr : &outcomes[0].best, options.milp_node_limit, milp_seconds);
      clock.record("milp", deadline,
                   milp->choice ? std::optional<std::int64_t>(choice_cost_sum(core, *milp->choice)) : std::nullopt);
    }
  }
  const SearchOutcome* best = &outcomes[0];
  for (const SearchOutcome& o : outcomes) {
    result.iterations += o.iterations;
    if (o.cost < best->cost) best = &o;
  }
  ShardingChoice core_choice = best->best;
  bool have_choice = !best->forbidden;
  result.method = "local search";
  if (milp) {
    if (milp->choice) {
      auto milp_cost = evaluate_choice(core, *milp->choice);
      auto ls_cost = evaluate_choice(core, core_choice);
      if (milp_cost && (!have_choice || !ls_cost || milp_cost->total <= ls_cost->total)) {
        core_choice = *milp->choice;
        have_choice = true;
        result.method = "milp";
      }
    }
    result.proven_optimal = milp->proven_optimal && have_choice;
    if (milp->proven_optimal && !milp->choice && !have_choice)
      return fail(fmt::format("{}: no choice avoids the forbidden strategy pairs within the usage limit of {}",
                              problem.name.empty() ? "the problem" : fmt::format("problem '{}'", problem.name),
                              problem.usage_limit),
                  "allow more strategy pairs or raise usage_limit");
  }
  if (!have_choice)
    return fail(fmt::format("{}: no choice found that avoids every forbidden strategy pair within the usage limit",
                            problem.name.empty() ? "the problem" : fmt::format("problem '{}'", problem.name)),
                "search longer (--timeout, --iterations), or allow more strategy pairs");
  result.choice = recover_choice(presolved, core_choice);
  auto cost = evaluate_choice(problem, result.choice);
  if (!cost)
    return fail(fmt::format("the solver's choice fails the evaluator: {}", cost.error().message),
                "this is a bug in the solver; please report it with the instance");
  result.cost = *cost;
  result.stages = clock.take_stages();
  if (options.progress) options.progress->finish();
  return result;
}

}  // namespace loom::search
