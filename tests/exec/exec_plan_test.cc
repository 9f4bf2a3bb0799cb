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

}  // namespace
}  // namespace loom::exec
