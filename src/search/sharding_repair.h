// Repair of a sharding choice that overflows the usage limit (the Lagrangian search's inner choices
// ignore the limit): usages are only ever lowered. At the most-used point, the live node whose move to a
// strategy of smaller usage costs the least per unit of usage saved (its node cost and its edges against
// the current neighbours) moves, until that point fits; then the next most-used point. A move never
// raises usage anywhere, so a fitted point stays fitted, and the repair succeeds whenever the least-usage
// choice fits.
#pragma once

#include "loom/search/sharding_problem.h"

namespace loom::search {

// Lowers usages in `choice` until its peak fits the limit; false when some point cannot be fitted.
bool repair_usage(const ShardingProblem& core, ShardingChoice& choice);

}  // namespace loom::search

namespace loom::search {

struct NodeGroups;

// The same repair with groups (sharding_groups.h) as the units: `group_choice` is a choice of
// `grouped` (group_problem(core, groups)); at the most-used point the group move (no member's usage rising)
// that costs the least per unit saved there, priced on `grouped` against the other groups, is made.
// Ties inside groups are never broken. False when some point cannot be fitted so.
bool repair_group_usage(const ShardingProblem& core, const NodeGroups& groups, const ShardingProblem& grouped,
                        ShardingChoice& group_choice);

// Group moves under the limit, after a repair: the repair moves whole groups to smaller usages, cheapest
// per unit saved at the peak, and overshoots (C ended at 0.95 of its limit, 1.6 x the contest's best),
// while node moves cannot undo a group's move without breaking its ties. Each group in turn takes the
// strategy that lowers the cost most (on `grouped`, against the other groups) among those that keep the
// whole profile within the limit; passes repeat until none lowers it or `max_passes` ran. `group_choice`
// must fit the limit; it still does after, and costs no more. Returns the moves made.
int improve_groups_within_limit(const ShardingProblem& core, const NodeGroups& groups, const ShardingProblem& grouped,
                                ShardingChoice& group_choice, int max_passes = 8);

}  // namespace loom::search
