#include "loom/exec/exec_plan.h"

#include <gtest/gtest.h>

namespace loom::exec {
namespace {

TEST(ExecPlanTest, BuffersGetConsecutiveIds) {
  ExecPlan exec;
  const plan::SubTensor piece = plan::SubTensor::whole(ir::TensorId(0), ir::Shape{{4, 2}});
  EXPECT_EQ(exec.add_buffer(0, piece, 64).value, 0u);
  EXPECT_EQ(exec.add_buffer(1, piece, 64).value, 1u);
  EXPECT_EQ(exec.buffer(BufferId(1)).device, 1);
  EXPECT_EQ(name(LocalKind::combine), "combine");
  EXPECT_EQ(name(LocalKind::accumulate), "accumulate");
}

TEST(ExecPlanTest, AddGroupStepGivesEqualCanonicalListsOneStep) {
  ExecPlan exec;
  EXPECT_EQ(exec.add_group_step({{0, 1}}), -1);  // one group: nothing to share
  EXPECT_EQ(exec.add_group_step({}), -1);
  const std::int64_t a = exec.add_group_step({{1, 0}, {3, 2}});
  EXPECT_EQ(a, 0);
  EXPECT_EQ(exec.add_group_step({{2, 3}, {0, 1}}), a);  // the same list in another order
  const std::int64_t b = exec.add_group_step({{0, 2}, {1, 3}});
  EXPECT_EQ(b, 1);
  EXPECT_EQ(exec.add_group_step({{3, 1}, {2, 0}}), b);
  ASSERT_EQ(exec.group_steps.size(), 2u);
  EXPECT_EQ(exec.group_steps[0], (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));  // stored canonical

  ExecPlan copy = exec;  // a copy keeps finding the steps it holds, and grows apart from the original
  EXPECT_EQ(copy.add_group_step({{2, 3}, {0, 1}}), a);
  EXPECT_EQ(copy.add_group_step({{0, 3}, {1, 2}}), 2);
  EXPECT_EQ(exec.add_group_step({{4, 5}, {6, 7}}), 2);
  EXPECT_EQ(copy.group_steps[2], (std::vector<std::vector<int>>{{0, 3}, {1, 2}}));

  exec.group_steps.push_back({{0, 4}, {1, 5}});  // appended directly: found too
  EXPECT_EQ(exec.add_group_step({{5, 1}, {4, 0}}), 3);
  EXPECT_EQ(exec.group_steps.size(), 4u);
  exec.group_steps.resize(1);  // cut: indexed afresh
  EXPECT_EQ(exec.add_group_step({{0, 1}, {2, 3}}), a);
  EXPECT_EQ(exec.add_group_step({{0, 2}, {1, 3}}), 1);
}

}  // namespace
}  // namespace loom::exec
