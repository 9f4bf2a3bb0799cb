// The block order of Megatron's pipelines (plan::BlockOrder, ParallelConfig::block_order) on shrunk T5:
// strict (the default) runs every stage block after the whole block before it, as Megatron-LM does;
// hoist lets a decoder stage start the next micro-batch's cross-attention keys and values inside the
// running forward. Both train exactly as one device; the policies that order their own blocks refuse hoist.
#include <gtest/gtest.h>

#include <string>

#include "loom/plan/schedule.h"
#include "policy_test_support.h"

namespace loom::policy {
namespace {

using testing::apply_error;
using testing::expect_mentions;
using testing::staged_micro_batch;

// Along each device's completed order, the first forward sub-op of a staged layer that runs after a sub-op
// of a later micro-batch ("decoder.layers.0.self_attn.sdpa[0/4] after decoder.layers.0.cross_attn.kv[1/4]"),
// or "" when the forwards come micro-batch after micro-batch on every device.
std::string first_hoisted(const plan::Plan& p, const ParallelConfig& config) {
  const auto order = plan::complete_order(p, device_count(config));
  EXPECT_TRUE(order) << order.error().to_string();
  if (!order) return "no order";
  for (int d = 0; d < device_count(config); ++d) {
    int latest = -1;
    std::string latest_name;
    for (plan::SubOpId id : order->per_device[static_cast<std::size_t>(d)]) {
      const plan::SubOp& s = p.sub_op(id);
      const ir::Op& op = p.graph->ops[s.op.index()];
      if (op.pass != ir::Pass::forward) continue;
      const int m = staged_micro_batch(s, op.name, config.micro_batches);
      if (m < 0) continue;
      if (m < latest) return "device " + std::to_string(d) + ": " + s.name + " after " + latest_name;
      if (m > latest) latest = m, latest_name = s.name;
    }
  }
  return "";
}

// Megatron's pipelines take their order from plan::apply_schedule. Tying each block to the block before
// it by its first sub-op only let a T5 decoder stage run the next micro-batch's cross-attention keys and
// values inside the running forward (~8-10 ms a micro-batch on t5-3.9b at tp 2 x pp 2), which Megatron-LM
// does not: under strict order the staged forwards come micro-batch after micro-batch, under 1F1B and GPipe.
TEST(MegatronPipeline, EveryBlockRunsAfterTheBlockBeforeIt) {
  for (const plan::ScheduleKind schedule : {plan::ScheduleKind::one_f_one_b, plan::ScheduleKind::gpipe}) {
    SCOPED_TRACE(std::string(plan::name(schedule)));
    const ParallelConfig config{.tp = 2, .pp = 2, .micro_batches = 4, .schedule = schedule};
    ASSERT_EQ(config.block_order, plan::BlockOrder::strict);  // the default
    const plan::Plan p = testing::planned("t5-3.9b", "megatron", config);
    ASSERT_NE(p.graph, nullptr);
    EXPECT_EQ(first_hoisted(p, config), "");
  }
}

// The hoisted order, asked for, is the other program: some decoder device starts a later micro-batch's
// cross-attention keys and values before the running forward ends.
TEST(MegatronPipeline, HoistStartsTheNextCrossAttentionInsideTheRunningForward) {
  for (const plan::ScheduleKind schedule : {plan::ScheduleKind::one_f_one_b, plan::ScheduleKind::gpipe}) {
    SCOPED_TRACE(std::string(plan::name(schedule)));
    const ParallelConfig config{
        .tp = 2, .pp = 2, .micro_batches = 4, .schedule = schedule, .block_order = plan::BlockOrder::hoist};
    const plan::Plan p = testing::planned("t5-3.9b", "megatron", config);
    ASSERT_NE(p.graph, nullptr);
    const std::string hoisted = first_hoisted(p, config);
    EXPECT_NE(hoisted.find("cross_attn"), std::string::npos) << "'" << hoisted << "'";
  }
}

TEST(MegatronPipeline, BothBlockOrdersTrainAsOneDevice) {
  for (const plan::BlockOrder block_order : {plan::BlockOrder::strict, plan::BlockOrder::hoist}) {
    SCOPED_TRACE(std::string(plan::name(block_order)));
    testing::expect_trains_exactly(
        "t5-3.9b", "megatron", {.tp = 2, .pp = 2, .micro_batches = 4, .block_order = block_order});
    testing::expect_trains_exactly(
        "t5-3.9b", "megatron",
        {.pp = 2, .micro_batches = 4, .schedule = plan::ScheduleKind::zb_h1, .block_order = block_order});
  }
}

// The interlaced pipeline and Oases' sub-batches order every sub-op of their blocks themselves: hoist is
// refused there rather than ignored.
TEST(MegatronPipeline, PoliciesWithTheirOwnBlockOrderRefuseHoist) {
  expect_mentions(apply_error("t5-3.9b", "interlaced", {.pp = 2, .micro_batches = 2, .block_order = plan::BlockOrder::hoist}),
                  {"does not combine with the hoist block order"});
  expect_mentions(apply_error("t5-3.9b", "megatron",
                              {.tp = 2, .pp = 2, .micro_batches = 2, .block_order = plan::BlockOrder::hoist,
                               .overlap = Overlap::oases}),
                  {"--overlap oases", "hoist block order", "drop --block-order"});
}

}  // namespace
}  // namespace loom::policy
