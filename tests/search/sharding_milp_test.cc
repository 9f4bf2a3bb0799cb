// The MILP's deadline: CBC checks its own time limit between nodes only, so solve_milp stops Clp and
// CBC by event handlers at the deadline; a run cut short never claims optimality.
#include "../../src/search/sharding_milp.h"

#include <gtest/gtest.h>

#include "sharding_test_grid.h"

namespace loom::search {
namespace {

TEST(SolveMilp, StopsAtItsDeadlineWithoutClaimingOptimality) {
  const ShardingProblem p = random_grid(12, 7);
  const MilpOutcome cut = solve_milp(p, nullptr, 20'000, 1e-9);
  EXPECT_FALSE(cut.proven_optimal);
  EXPECT_TRUE(cut.stopped_at_deadline);  // the time counts from the call: building the model used it up
  if (cut.choice) {
    EXPECT_EQ(cut.choice->strategies.size(), p.nodes.size());
  }
  // Given time and nodes, the same MILP is solved (the deadline, not the model, stopped the first run).
  const MilpOutcome full = solve_milp(p, nullptr, 20'000, 60);
  ASSERT_TRUE(full.choice.has_value());
  EXPECT_FALSE(full.stopped_at_deadline);
  EXPECT_TRUE(evaluate_choice(p, *full.choice).has_value());
}

}  // namespace
}  // namespace loom::search
