// What each policy does to the ops, checked on the plan's boxes, value parts and devices; and the
// errors for bad policies and degrees.
#include <algorithm>

#include "loom/plan/validate.h"
#include "loom/policy/tensor_parallel.h"
#include "policy_test_support.h"

namespace loom::policy {
namespace {

using plan::IndexRange;
using plan::ValuePart;
using testing::apply_error;
using testing::devices_of;
using testing::expect_mentions;
using testing::op_named;
using testing::parts_of;
using testing::planned;
using testing::shrunk;

IndexRange range(std::int64_t start, std::int64_t stop) { return {start, stop, 1}; }

// Part k of n of [0, size) for each of the n parts, in order.
std::vector<IndexRange> halves(std::int64_t size) { return {range(0, size / 2), range(size / 2, size)}; }

std::vector<IndexRange> input_ranges(const std::vector<const plan::SubOp*>& parts, std::size_t input, std::size_t dim) {
  std::vector<IndexRange> ranges;
  for (const plan::SubOp* s : parts) ranges.push_back(s->inputs[input].box[dim]);
  return ranges;
}

std::vector<IndexRange> output_ranges(const std::vector<const plan::SubOp*>& parts, std::size_t output,
                                      std::size_t dim) {
  std::vector<IndexRange> ranges;
  for (const plan::SubOp* s : parts) ranges.push_back(s->outputs[output].box[dim]);
  return ranges;
}

std::vector<ValuePart> output_values(const std::vector<const plan::SubOp*>& parts, std::size_t output = 0) {
  std::vector<ValuePart> values;
  for (const plan::SubOp* s : parts) values.push_back(s->outputs[output].value);
  return values;
}

// Every part reads and writes the whole tensors: replicas.
void expect_replicas(const plan::Plan& p, std::string_view name, const std::vector<int>& devices) {
  SCOPED_TRACE(std::string(name));
  const auto parts = parts_of(p, name);
  EXPECT_EQ(devices_of(parts), devices);
  for (const plan::SubOp* s : parts) {
    for (std::size_t i = 0; i < s->inputs.size(); ++i)
      EXPECT_EQ(s->inputs[i].local_shape(), p.graph->tensor(s->inputs[i].tensor).shape) << "input " << i;
    for (const plan::SubTensor& out : s->outputs) EXPECT_TRUE(out.value.is_whole());
  }
}

const std::vector<ValuePart> kTwoPartials = {{0, 2}, {1, 2}};

TEST(TensorParallel, GptAttentionAndMlpAreMegatronPairs) {
  const plan::Plan p = planned("gpt3-125m", "tp", {.tp = 2});
  // fc1 column parallel: its weight [64 16] split along the output features, its output along the FFN.
  const auto fc1 = parts_of(p, "layers.0.mlp.fc1");
  EXPECT_EQ(devices_of(fc1), (std::vector<int>{0, 1}));
  EXPECT_EQ(input_ranges(fc1, 1, 0), halves(64));
  EXPECT_EQ(input_ranges(fc1, 1, 1), (std::vector<IndexRange>{range(0, 16), range(0, 16)}));
  EXPECT_EQ(output_ranges(fc1, 0, 2), halves(64));
  // gelu split the same way; fc2 row parallel: weight [16 64] split along its input, partial sums out.
  EXPECT_EQ(output_ranges(parts_of(p, "layers.0.mlp.act"), 0, 2), halves(64));
  const auto fc2 = parts_of(p, "layers.0.mlp.fc2");
  EXPECT_EQ(devices_of(fc2), (std::vector<int>{0, 1}));
  EXPECT_EQ(input_ranges(fc2, 1, 1), halves(64));
  EXPECT_EQ(input_ranges(fc2, 1, 0), (std::vector<IndexRange>{range(0, 16), range(0, 16)}));
  EXPECT_EQ(output_values(fc2), kTwoPartials);
  // Attention: the fused qkv [48 16] column parallel in whole heads, sdpa split by heads, out row parallel.
  EXPECT_EQ(input_ranges(parts_of(p, "layers.0.attn.qkv"), 1, 0), halves(48));
  EXPECT_EQ(input_ranges(parts_of(p, "layers.0.attn.sdpa"), 0, 1), halves(4));
  const auto out = parts_of(p, "layers.0.attn.out");
  EXPECT_EQ(input_ranges(out, 1, 1), halves(16));
  EXPECT_EQ(output_values(out), kTwoPartials);
  // The token embedding and the LM head are vocabulary parallel (vocab_parallel_head_test.cc); norms,
  // residual adds and the loss's final mean are replicated.
  const auto wte = parts_of(p, "wte");
  EXPECT_EQ(input_ranges(wte, 1, 0), halves(64));
  EXPECT_EQ(output_values(wte), kTwoPartials);
  for (const char* name : {"layers.0.ln1", "layers.0.attn_residual", "layers.1.ln2", "ln_f", "loss", "wpe"})
    expect_replicas(p, name, {0, 1});
  // Optimizer steps follow their parameter: fc1's weight rows split, LayerNorm weights replicated.
  EXPECT_EQ(input_ranges(parts_of(p, "layers.0.mlp.fc1.weight.sgd"), 0, 0), halves(64));
  EXPECT_EQ(input_ranges(parts_of(p, "layers.1.mlp.fc2.weight.sgd"), 0, 1), halves(64));
  EXPECT_EQ(input_ranges(parts_of(p, "wte.weight.sgd"), 0, 0), halves(64));
  expect_replicas(p, "layers.0.ln1.weight.sgd", {0, 1});
  // Backward parts go with their forward parts.
  for (const plan::SubOp* s : fc1) EXPECT_EQ(p.sub_op(s->mirror).device, s->device);
}

TEST(TensorParallel, GptLayoutNamesTheSplitIdentifiers) {
  const testing::Model& model = shrunk("gpt3-125m");
  auto made = plan::make_plan(model.graph, ops::builtin_ops());
  ASSERT_TRUE(made);
  auto layout = tensor_parallel_layout(*made, 2);
  ASSERT_TRUE(layout) << layout.error().to_string();
  const auto split_of = [&](std::string_view name) -> std::string {
    const auto& s = layout->splits[op_named(*made, name)->id.index()];
    return s ? s->identifier : "-";
  };
  EXPECT_EQ(split_of("layers.0.attn.qkv"), "o");
  EXPECT_EQ(split_of("layers.0.attn.qkv.view"), "c");
  EXPECT_EQ(split_of("layers.0.attn.sdpa"), "h");
  EXPECT_EQ(split_of("layers.0.attn.out"), "i");
  EXPECT_EQ(split_of("layers.0.mlp.fc1"), "o");
  EXPECT_EQ(split_of("layers.0.mlp.fc2"), "i");
  EXPECT_EQ(split_of("lm_head"), "o");  // vocabulary parallel: its region closes in the loss's parts
  EXPECT_EQ(split_of("loss_parts"), "v");
  EXPECT_EQ(split_of("loss"), "-");
  EXPECT_EQ(split_of("layers.0.ln1"), "-");
}

TEST(TensorParallel, MoeExpertsAreSplitAcrossRanks) {
  const plan::Plan p = planned("moe-380m", "tp", {.tp = 2});
  const auto fc1 = parts_of(p, "layers.1.moe.experts.fc1");
  EXPECT_EQ(input_ranges(fc1, 1, 0), halves(4));  // wi [4 16 32]: two experts per rank
  EXPECT_EQ(input_ranges(fc1, 0, 0), halves(4));  // the tokens dispatched to them
  EXPECT_EQ(input_ranges(parts_of(p, "layers.1.moe.experts.fc2"), 1, 0), halves(4));
  EXPECT_EQ(output_values(parts_of(p, "layers.1.moe.combine")), kTwoPartials);
  expect_replicas(p, "layers.1.moe.gate", {0, 1});
  // The dense layer is a Megatron MLP.
  EXPECT_EQ(input_ranges(parts_of(p, "layers.0.mlp.fc1"), 1, 0), halves(32));
}

TEST(TensorParallel, AlphaFoldAttentionsSplitHeadsTransitionsArePairs) {
  const plan::Plan p = planned("alphafold2-87m", "tp", {.tp = 2});
  const std::string block = "iteration1.evoformer.0.";
  const auto row = parts_of(p, block + "msa_row_attention.attention");
  EXPECT_EQ(input_ranges(row, 2, 1), halves(8));  // qkvg [4 h d c]: 4 of the 8 MSA heads per rank
  EXPECT_EQ(output_values(row), kTwoPartials);    // with the output projection: partial sums
  EXPECT_EQ(input_ranges(parts_of(p, block + "triangle_attention_ending.attention"), 2, 1), halves(4));
  EXPECT_EQ(input_ranges(parts_of(p, block + "msa_transition.linear1"), 1, 0), halves(128));
  EXPECT_EQ(output_values(parts_of(p, block + "pair_transition.linear2")), kTwoPartials);
  for (const char* name : {"triangle_multiplication_outgoing.update", "outer_product_mean.update", "msa_row_attention.norm_m"})
    expect_replicas(p, block + name, {0, 1});
}

TEST(TensorParallel, SwinWindowAttentionSplitsHeadsPatchMergeReplicated) {
  const plan::Plan p = planned("swin-1.8b", "tp", {.tp = 2});
  EXPECT_EQ(input_ranges(parts_of(p, "layers.1.blocks.0.attn.sdpa"), 0, 1), halves(8));  // stage 2: 8 heads
  EXPECT_EQ(input_ranges(parts_of(p, "layers.0.blocks.1.mlp.fc1"), 1, 0), halves(64));
  expect_replicas(p, "layers.0.downsample.reduction", {0, 1});
  expect_replicas(p, "layers.0.blocks.1.shift", {0, 1});
}

TEST(TensorParallel, T5CrossAttentionIsColumnThenRowParallel) {
  const plan::Plan p = planned("t5-3.9b", "tp", {.tp = 2});
  EXPECT_EQ(input_ranges(parts_of(p, "decoder.layers.0.cross_attn.kv"), 1, 0), halves(32));
  EXPECT_EQ(input_ranges(parts_of(p, "decoder.layers.0.cross_attn.out"), 1, 1), halves(16));
  EXPECT_EQ(input_ranges(parts_of(p, "encoder.layers.0.attn.sdpa"), 3, 0), halves(4));  // the relative bias, by head
  // The bias is computed split as attention reads it: each rank its heads' columns of the table.
  EXPECT_EQ(output_ranges(parts_of(p, "encoder.relative_attention_bias.permute"), 0, 0), halves(4));
  EXPECT_EQ(input_ranges(parts_of(p, "encoder.relative_attention_bias"), 1, 1), halves(4));
}

TEST(DataParallel, EveryForwardOpHasOnePartPerDevice) {
  const plan::Plan p = planned("gpt3-125m", "dp", {.dp = 2});
  for (const ir::Op& op : p.graph->ops) {
    if (op.pass != ir::Pass::forward) continue;
    EXPECT_EQ(devices_of(parts_of(p, op.name)), (std::vector<int>{0, 1})) << op.name;
  }
  // The batch is split: ids [4 8] in halves; the weight gradient of each half is a partial sum.
  const auto fc1 = parts_of(p, "layers.0.mlp.fc1");
  EXPECT_EQ(input_ranges(fc1, 0, 0), halves(4));
  std::vector<ValuePart> weight_grads;
  for (const plan::SubOp* s : fc1) weight_grads.push_back(p.sub_op(s->mirror).outputs[1].value);
  EXPECT_EQ(weight_grads, kTwoPartials);
  EXPECT_EQ(output_values(parts_of(p, "loss")), kTwoPartials);
  expect_replicas(p, "wpe", {0, 1});  // position table: no batch
  expect_replicas(p, "layers.0.mlp.fc1.weight.sgd", {0, 1});
}

TEST(DataTensorParallel, BatchSplitFirstThenMegatronInsideEachPart) {
  const plan::Plan p = planned("gpt3-125m", "dp-tp", {.dp = 2, .tp = 2});
  const auto fc2 = parts_of(p, "layers.0.mlp.fc2");
  ASSERT_EQ(fc2.size(), 4u);
  for (const plan::SubOp* s : fc2) {
    const int dp_rank = s->device / 2, tp_rank = s->device % 2;
    EXPECT_EQ(s->inputs[0].box[0], halves(4)[static_cast<std::size_t>(dp_rank)]) << s->name;
    EXPECT_EQ(s->inputs[1].box[1], halves(64)[static_cast<std::size_t>(tp_rank)]) << s->name;
  }
  EXPECT_EQ(devices_of(fc2), (std::vector<int>{0, 1, 2, 3}));
  // Optimizer steps: replicated over dp, split over tp like their parameter.
  const auto step = parts_of(p, "layers.0.mlp.fc1.weight.sgd");
  ASSERT_EQ(step.size(), 4u);
  for (const plan::SubOp* s : step) EXPECT_EQ(s->inputs[0].box[0], halves(64)[static_cast<std::size_t>(s->device % 2)]);
}

TEST(Pipeline, StagesMicroBatchesAndOneFOneBOrder) {
  const plan::Plan p = planned("gpt3-125m", "pp", {.pp = 2, .micro_batches = 4});
  const auto wte = parts_of(p, "wte");
  EXPECT_EQ(devices_of(wte), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(input_ranges(wte, 0, 0), (std::vector<IndexRange>{range(0, 1), range(1, 2), range(2, 3), range(3, 4)}));
  for (const char* name : {"layers.0.mlp.fc2", "layers.0.attn.sdpa"})
    EXPECT_EQ(devices_of(parts_of(p, name)), (std::vector<int>{0, 0, 0, 0})) << name;
  for (const char* name : {"layers.1.mlp.fc2", "ln_f", "lm_head", "loss"})
    EXPECT_EQ(devices_of(parts_of(p, name)), (std::vector<int>{1, 1, 1, 1})) << name;
  EXPECT_EQ(devices_of(parts_of(p, "wte.weight.sgd")), (std::vector<int>{0}));
  EXPECT_EQ(devices_of(parts_of(p, "ln_f.weight.sgd")), (std::vector<int>{1}));
  // 1F1B on stage 0 of 2: F0 F1 B0 F2 B1 F3 B2 B3.
  auto order = plan::complete_order(p, 2);
  ASSERT_TRUE(order) << order.error().to_string();
  const auto& program = order->per_device[0];
  const auto at = [&](plan::SubOpId id) { return std::find(program.begin(), program.end(), id) - program.begin(); };
  const auto f = [&](int k) { return wte[static_cast<std::size_t>(k)]->id; };
  const auto b = [&](int k) { return wte[static_cast<std::size_t>(k)]->mirror; };
  EXPECT_LT(at(f(1)), at(b(0)));
  EXPECT_LT(at(b(0)), at(f(2)));
  EXPECT_LT(at(f(2)), at(b(1)));
  EXPECT_LT(at(b(1)), at(f(3)));
}

TEST(Pipeline, GPipeRunsEveryForwardFirst) {
  const plan::Plan p = planned("t5-3.9b", "pp", {.pp = 2, .micro_batches = 2, .schedule = plan::ScheduleKind::gpipe});
  auto order = plan::complete_order(p, 2);
  ASSERT_TRUE(order) << order.error().to_string();
  const auto& program = order->per_device[0];
  const auto embed = parts_of(p, "encoder.embed_tokens");
  const auto at = [&](plan::SubOpId id) { return std::find(program.begin(), program.end(), id) - program.begin(); };
  EXPECT_LT(at(embed[1]->id), at(embed[0]->mirror));
}

TEST(DeviceNumbering, TensorInnermostThenDataThenPipeline) {
  const ParallelConfig c{.dp = 2, .tp = 2, .pp = 2};
  EXPECT_EQ(device_count(c), 8);
  EXPECT_EQ(device_of(c, 0, 0, 1), 1);
  EXPECT_EQ(device_of(c, 0, 1, 0), 2);
  EXPECT_EQ(device_of(c, 1, 1, 0), 6);
  const plan::Plan p = planned("gpt3-125m", "megatron", c);
  EXPECT_EQ(devices_of(parts_of(p, "layers.0.ln1")), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(devices_of(parts_of(p, "loss")), (std::vector<int>{4, 5, 6, 7}));
}

// ---- bad input -----------------------------------------------------------------------------------


TEST(PolicyErrors, UnknownPolicyListsTheKnownOnes) {
  expect_mentions(apply_error("gpt3-125m", "zero3", {}),
                  {"unknown policy 'zero3'", "dp, tp, dp-tp, pp, megatron, coshard, interlaced, zero"});
  EXPECT_EQ(known_policy_names(), "dp, tp, dp-tp, pp, megatron, coshard, interlaced, zero");
  EXPECT_EQ(known_policies().size(), 8u);
}

TEST(PolicyErrors, DegreesThatDoNotDivideNameTheOpAndTheDimension) {
  expect_mentions(apply_error("gpt3-125m", "tp", {.tp = 8}),
                  {"tensor parallelism 8", "layers.0.attn.qkv.view", "'c'", "4 elements"});
  expect_mentions(apply_error("alphafold2-87m", "tp", {.tp = 8}), {"triangle_attention_starting", "'h'", "4 elements"});
  expect_mentions(apply_error("gpt3-125m", "dp", {.dp = 3}), {"batch 4 of input 'input_ids'", "'wte'", "dp 3"});
  expect_mentions(apply_error("swin-1.8b", "pp", {.pp = 2, .micro_batches = 8}), {"batch 4", "8 micro-batches"});
}

TEST(PolicyErrors, MicroBatchesOfAWholeBatchStatisticAreRefusedNamingTheOp) {
  // The fused batch norm's statistics need the whole batch ('n^'): micro-batches would couple (was a
  // deadlock reported by materialization); one micro-batch over dp keeps them whole.
  for (const char* policy : {"dp", "megatron"})
    expect_mentions(apply_error("resnet-50", policy, {.dp = 2, .micro_batches = 2}),
                    {"2 micro-batches", "stem.stem.bn", "batch_norm", "cannot split", "n^ c h^ w^"});
  // 1F1B's stage 0 runs pp forwards before its first backward: 2 micro-batches fit in them, 4 do not.
  expect_mentions(apply_error("resnet-50", "megatron", {.pp = 2, .micro_batches = 4}), {"4 micro-batches", "stem.stem.bn"});
  EXPECT_EQ(parts_of(planned("resnet-50", "megatron", {.pp = 2, .micro_batches = 2}), "stem.stem.bn").size(), 1U);
  // GPipe runs every forward first.
  ParallelConfig gpipe{.pp = 2, .micro_batches = 4};
  gpipe.schedule = plan::ScheduleKind::gpipe;
  EXPECT_EQ(parts_of(planned("resnet-50", "megatron", gpipe), "stem.stem.bn").size(), 1U);
}

TEST(PolicyErrors, DegreesThePolicyDoesNotUseOrCannotHave) {
  expect_mentions(apply_error("gpt3-125m", "dp", {.dp = 2, .tp = 2}), {"policy 'dp' does not use tp", "megatron"});
  expect_mentions(apply_error("gpt3-125m", "tp", {.tp = 0}), {"tp is 0"});
  expect_mentions(apply_error("gpt3-125m", "megatron", {.dp = 1 << 10, .tp = 1 << 10}), {"over Loom's limit"});
  expect_mentions(apply_error("gpt3-125m", "pp", {.pp = 64}), {"64 stages", "no op that sees the batch"});
}

TEST(PolicyErrors, APlanIsTransformedOnce) {
  auto made = plan::make_plan(shrunk("gpt3-125m").graph, ops::builtin_ops());
  ASSERT_TRUE(made);
  ASSERT_TRUE(apply_policy(*made, "dp", {.dp = 2}));
  auto again = apply_policy(*made, "tp", {.tp = 2});
  ASSERT_FALSE(again);
  expect_mentions(again.error(), {"already transformed", "fresh plan"});
}

}  // namespace
}  // namespace loom::policy
