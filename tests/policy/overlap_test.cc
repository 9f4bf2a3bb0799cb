// Oases' sub-batches (policy/overlap.h): megatron's plans with every batch-carrying op split into two
// sub-batches per device, ordered as Algorithm 1 interleaves them, still training exactly as one device.
#include "loom/policy/overlap.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "loom/plan/batch.h"
#include "loom/plan/validate.h"
#include "policy_test_support.h"

namespace loom::policy {
namespace {

using testing::parts_of;
using testing::planned;
using testing::shrunk;

constexpr ParallelConfig kTp2{.tp = 2, .overlap = Overlap::oases};

// Every forward op that sees the batch has 2 x micro_batches parts on each device it runs on (plain
// megatron: micro_batches), the sub-batches of one micro-batch covering it in two equal halves.
TEST(OasesOverlap, EveryBatchOpRunsAsTwoSubBatchesPerDevice) {
  for (const ParallelConfig& config :
       {kTp2, ParallelConfig{.dp = 2, .tp = 2, .overlap = Overlap::oases},
        ParallelConfig{.tp = 2, .micro_batches = 2, .overlap = Overlap::oases}}) {
    SCOPED_TRACE(config.dp * 10 + config.micro_batches);
    const plan::Plan p = planned("gpt3-125m", "megatron", config);
    ParallelConfig plain = config;
    plain.overlap = Overlap::none;
    const plan::Plan q = planned("gpt3-125m", "megatron", plain);
    const auto batch = plan::batch_identifiers(p);
    int checked = 0;
    for (const ir::Op& op : p.graph->ops) {
      if (op.pass != ir::Pass::forward || !batch[op.id.index()]) continue;
      std::map<int, int> with, without;
      for (plan::SubOpId s : p.parts[op.id.index()]) ++with[p.sub_op(s).device];
      for (plan::SubOpId s : q.parts[op.id.index()]) ++without[q.sub_op(s).device];
      ASSERT_EQ(with.size(), without.size()) << op.name;
      for (const auto& [device, n] : without) EXPECT_EQ(with[device], 2 * n) << op.name << " on " << device;
      EXPECT_EQ(without.begin()->second, config.micro_batches) << op.name;
      ++checked;
    }
    EXPECT_GT(checked, 20);
    // Sub-batch 0 and 1 of a linear on device 0: the two halves of its micro-batch's rows.
    const auto fc1 = parts_of(p, "layers.0.mlp.fc1");
    std::vector<const plan::SubOp*> on0;
    for (const plan::SubOp* s : fc1)
      if (s->device == 0) on0.push_back(s);
    ASSERT_EQ(on0.size(), 2u * static_cast<std::size_t>(config.micro_batches));
    const plan::IndexRange a = on0[0]->inputs[0].box[0], b = on0[1]->inputs[0].box[0];
    // With dp 2 the micro-batches split first: device 0 holds samples [0, 1) and [2, 3) of 4.
    EXPECT_EQ(a.size(), b.size());
    EXPECT_LE(a.stop, b.start);
  }
}

// Device d's completed order: position of each sub-op.
std::map<plan::SubOpId, std::size_t> positions(const plan::Plan& p, int devices, int d) {
  const auto order = plan::complete_order(p, devices);
  EXPECT_TRUE(order) << order.error().to_string();
  std::map<plan::SubOpId, std::size_t> at;
  if (!order) return at;
  const auto& seq = order->per_device[static_cast<std::size_t>(d)];
  for (std::size_t i = 0; i < seq.size(); ++i) at[seq[i]] = i;
  return at;
}

// Sub-batch k of `op` on device d (forward, or its backward part).
plan::SubOpId sub_batch(const plan::Plan& p, std::string_view op, int d, int k, bool backward = false) {
  std::vector<const plan::SubOp*> on;
  for (const plan::SubOp* s : parts_of(p, op))
    if (s->device == d) on.push_back(s);
  EXPECT_EQ(on.size(), 2u) << op;
  if (on.size() != 2) return {};
  const plan::SubOp& s = *on[static_cast<std::size_t>(k)];
  return backward ? s.mirror : s.id;
}

// Algorithm 1 on GPT's layer: sub-batch 0 runs up to a row-parallel linear (whose all-reduce follows),
// then sub-batch 1 runs the same segment, then sub-batch 0 the next one; in the backward the segments
// end at the column-parallel linears' backward (whose input gradients are all-reduced). On every tp rank.
TEST(OasesOverlap, SegmentsAlternateBetweenSubBatchesAtCommunicationPoints) {
  const plan::Plan p = planned("gpt3-125m", "megatron", kTp2);
  ASSERT_FALSE(p.orders.empty());
  for (int d = 0; d < 2; ++d) {
    SCOPED_TRACE(d);
    const auto at = positions(p, 2, d);
    const auto before = [&](std::string_view a, int ka, std::string_view b, int kb, bool backward) {
      const plan::SubOpId x = sub_batch(p, a, d, ka, backward), y = sub_batch(p, b, d, kb, backward);
      EXPECT_LT(at.at(x), at.at(y)) << a << "[" << ka << "] before " << b << "[" << kb << "]";
    };
    // Forward: attention's segment ends at attn.out, the MLP's at fc2.
    before("layers.0.attn.out", 0, "layers.0.ln1", 1, false);
    before("layers.0.attn.out", 1, "layers.0.attn.dropout", 0, false);
    before("layers.0.attn.dropout", 0, "layers.0.attn.dropout", 1, false);
    before("layers.0.mlp.fc2", 0, "layers.0.attn.dropout", 1, false);
    before("layers.0.mlp.fc2", 1, "layers.0.mlp.dropout", 0, false);
    // Backward: the MLP's segment ends at fc1's backward, attention's at qkv's.
    before("layers.0.mlp.fc1", 0, "layers.0.mlp.fc2", 1, true);
    before("layers.0.mlp.fc1", 1, "layers.0.ln2", 0, true);
    before("layers.0.attn.qkv", 0, "layers.0.attn.out", 1, true);
    before("layers.0.attn.qkv", 1, "layers.0.ln1", 0, true);
    // And the whole forward of both sub-batches before their backward.
    EXPECT_LT(at.at(sub_batch(p, "loss", d, 1)), at.at(sub_batch(p, "loss", d, 0, true)));
  }
}

// With a pipeline (pp 2 x tp 2, 2 micro-batches), the 1F1B template runs over the sub-batch pairs: the
// last stage runs F0 B0 F1 B1, the first F0 F1 B0 B1 (warm-up pp - rank), each block the pair's
// interleaved segments; a pair's two sub-batches never split across blocks.
TEST(OasesOverlap, PipelineScheduleRunsOverSubBatchPairs) {
  const plan::Plan p =
      planned("gpt3-125m", "megatron", {.tp = 2, .pp = 2, .micro_batches = 2, .overlap = Overlap::oases});
  // Part 2k + x of `op` on device d is sub-batch x of micro-batch k (forward, or its backward part).
  const auto part = [&](std::string_view op, int d, int k, int x, bool backward) {
    std::vector<const plan::SubOp*> on;
    for (const plan::SubOp* s : parts_of(p, op))
      if (s->device == d) on.push_back(s);
    EXPECT_EQ(on.size(), 4u) << op << " on " << d;
    if (on.size() != 4) return plan::SubOpId{};
    const plan::SubOp& s = *on[static_cast<std::size_t>(2 * k + x)];
    return backward ? s.mirror : s.id;
  };
  const auto device_of = [&](std::string_view op) { return parts_of(p, op).front()->device; };
  const int first = device_of("wte"), last = device_of("loss");
  ASSERT_NE(first, last);
  const std::string first_op = "wte", last_op = "loss";
  for (const auto& [d, op] : {std::pair{first, first_op}, std::pair{last, last_op}}) {
    SCOPED_TRACE(d);
    const auto at = positions(p, 4, d);
    const auto pos = [&](int k, int x, bool backward) { return at.at(part(op, d, k, x, backward)); };
    // Both sub-batches of a pair's forward before either's backward, and pair 0's backward before pair 1's.
    EXPECT_LT(pos(0, 1, false), pos(0, 0, true));
    EXPECT_LT(pos(0, 1, true), pos(1, 0, true));
    if (d == last) {
      EXPECT_LT(pos(0, 1, true), pos(1, 0, false));  // 1F1B's steady state: B0 before F1
    } else {
      EXPECT_LT(pos(1, 1, false), pos(0, 0, true));  // warm-up: F0 F1, then B0
    }
  }
  // Inside a block, the segments alternate between the pair's sub-batches (a layer of the last stage).
  const int d = device_of("layers.1.mlp.fc2");
  const auto at = positions(p, 4, d);
  EXPECT_LT(at.at(part("layers.1.attn.out", d, 1, 0, false)), at.at(part("layers.1.ln1", d, 1, 1, false)));
  EXPECT_LT(at.at(part("layers.1.attn.out", d, 1, 1, false)), at.at(part("layers.1.attn.dropout", d, 1, 0, false)));
}

TEST(OasesOverlap, TrainsExactlyAsOneDevice) {
  for (const char* preset : {"gpt3-125m", "llama3-8b"}) {
    testing::expect_trains_exactly(preset, "megatron", kTp2);
    testing::expect_trains_exactly(preset, "megatron",
                                   {.dp = 2, .tp = 2, .recompute = Recompute::full, .overlap = Overlap::oases});
    testing::expect_trains_exactly(preset, "megatron", {.tp = 2, .micro_batches = 2, .overlap = Overlap::oases});
    testing::expect_trains_exactly(preset, "megatron",
                                   {.tp = 2, .pp = 2, .micro_batches = 2, .overlap = Overlap::oases});
  }
}

Expected<void> plan_with(const ParallelConfig& config) {
  auto made = plan::make_plan(shrunk("gpt3-125m").graph, ops::builtin_ops());
  if (!made) return std::unexpected(made.error());
  return apply_policy(*made, "megatron", config);
}

TEST(OasesOverlap, ErrorsNameTheCause) {
  const auto one = plan_with({.tp = 1, .overlap = Overlap::oases});
  ASSERT_FALSE(one);
  EXPECT_NE(one.error().message.find("tp is 1"), std::string::npos) << one.error().message;
  const auto zero_bubble = plan_with(
      {.tp = 2, .pp = 2, .micro_batches = 2, .schedule = plan::ScheduleKind::zb_h1, .overlap = Overlap::oases});
  ASSERT_FALSE(zero_bubble);
  EXPECT_NE(zero_bubble.error().message.find("pipelines with the 1f1b or gpipe schedule, one model chunk per device "
                                             "(here zb-h1, 1 chunks)"),
            std::string::npos)
      << zero_bubble.error().message;
  const auto interleaved =
      plan_with({.tp = 2, .pp = 2, .micro_batches = 2, .virtual_stages = 2, .overlap = Overlap::oases});
  ASSERT_FALSE(interleaved);
  EXPECT_NE(interleaved.error().message.find("2 chunks"), std::string::npos) << interleaved.error().message;
  // The shrunk GPT's batch of 4 over dp 2 x 2 micro-batches leaves 1 sample per device and micro-batch.
  const auto odd = plan_with({.dp = 2, .tp = 2, .micro_batches = 2, .overlap = Overlap::oases});
  ASSERT_FALSE(odd);
  EXPECT_NE(odd.error().message.find("op 'wte' reads a batch of 1 per device and micro-batch"), std::string::npos)
      << odd.error().message;
  EXPECT_EQ(parse_overlap("oases"), Overlap::oases);
  EXPECT_FALSE(parse_overlap("async"));
}

}  // namespace
}  // namespace loom::policy
