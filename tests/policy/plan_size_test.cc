// policy/plan_size.h: the explicit plan's size, which the job pipeline refuses above its limit and the
// search reads so it never picks a finalist the pipeline would refuse.
#include "loom/policy/plan_size.h"

#include <gtest/gtest.h>

namespace loom::policy {
namespace {

TEST(PlanSize, SubOpsAreThreePerForwardOpPerReplicaShardAndMicroBatch) {
  ParallelConfig c;
  c.dp = 8;
  c.tp = 2;
  EXPECT_DOUBLE_EQ(explicit_sub_ops(100, c, 4), 3.0 * 100 * 8 * 2 * 4);
}

TEST(PlanSize, ZeroWeighsMoreByItsDataParallelRanks) {
  ParallelConfig plain;
  plain.dp = 64;
  ParallelConfig zero = plain;
  zero.zero = 3;
  EXPECT_DOUBLE_EQ(explicit_plan_bytes(1000, plain, 8), explicit_sub_ops(1000, plain, 8) * 5 * 1024);
  EXPECT_DOUBLE_EQ(explicit_plan_bytes(1000, zero, 8), explicit_sub_ops(1000, zero, 8) * (5 * 1024 + 64 * 64));
  // The limit is what kExplicitSubOpLimit sub-ops take without ZeRO: a ZeRO plan of fewer sub-ops can pass it.
  EXPECT_DOUBLE_EQ(explicit_plan_bytes_limit(), static_cast<double>(kExplicitSubOpLimit) * 5 * 1024);
  const int forward_ops = 1900;
  EXPECT_LT(explicit_sub_ops(forward_ops, zero, 8), static_cast<double>(kExplicitSubOpLimit));
  EXPECT_GT(explicit_plan_bytes(forward_ops, zero, 8), explicit_plan_bytes_limit());
  EXPECT_LT(explicit_plan_bytes(forward_ops, plain, 8), explicit_plan_bytes_limit());
}

TEST(PlanSize, NonsenseDegreesDoNotOverflow) {
  ParallelConfig c;
  c.dp = 1 << 30;
  c.tp = 1 << 30;
  EXPECT_GT(explicit_sub_ops(1 << 20, c, 1 << 20), 1e30);
}

}  // namespace
}  // namespace loom::policy
