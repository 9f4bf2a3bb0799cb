// nnScaler's interlaced pipeline (policy/interlaced.h) on shrunk T5 and mBART: the embedding lookups, the
// tied head and the loss split over all pp x tp devices of a replica (one part per device), the layers on
// their stage's devices only, and the materialized plan (whose check finds deadlocks) training as one
// device does; and the errors.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "loom/plan/validate.h"
#include "policy_test_support.h"
#include "loom/policy/interlaced.h"
#include "loom/policy/stages.h"

namespace loom::policy {
namespace {

using exec::testing::policy_plan;
using testing::apply_error;
using testing::deep;
using testing::expect_mentions;
using testing::staged_micro_batch;

plan::Plan interlaced_plan(const ir::Graph& graph, const ParallelConfig& config) {
  auto made = plan::make_plan(graph, ops::builtin_ops());
  EXPECT_TRUE(made) << made.error().to_string();
  auto applied = apply_policy(*made, "interlaced", config);
  EXPECT_TRUE(applied) << applied.error().to_string();
  return std::move(*made);
}

// By (micro-batch, dp rank) part group: the devices of an op's live parts, each group's in creation order.
std::vector<int> devices_of_op(const plan::Plan& p, std::string_view name) {
  std::vector<int> devices;
  for (const plan::SubOp* s : testing::parts_of(p, name))
    if (s->live) devices.push_back(s->device);
  return devices;
}

TEST(Interlaced, SharedOpsHaveOnePartOnEveryDeviceAndLayersStayOnTheirStage) {
  // T5 with 2 + 2 layers on pp 2 x tp 2 x dp 2 (8 devices), 2 micro-batches: each lookup, the head and the
  // loss's vocabulary ops have, per micro-batch and dp rank, one part on each of the replica's 4 devices.
  const ParallelConfig config{.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2};
  const plan::Plan p = interlaced_plan(deep("t5-3.9b", 4), config);
  for (const char* op : {"encoder.embed_tokens", "decoder.embed_tokens", "lm_head", "loss_parts", "loss_shift",
                         "encoder.embed_tokens.backward", "lm_head.backward"}) {
    SCOPED_TRACE(op);
    const std::vector<int> devices = devices_of_op(p, op);
    ASSERT_EQ(devices.size(), 2U * 2U * 4U);  // micro-batches x dp x (pp x tp)
    std::map<int, int> count;
    for (int d : devices) ++count[d];
    EXPECT_EQ(count.size(), 8U);
    for (const auto& [d, n] : count) EXPECT_EQ(n, 2) << "device " << d;  // one part per micro-batch
    // Each group of pp x tp parts (one micro-batch of one dp rank) covers the replica's devices.
    for (std::size_t g = 0; g < devices.size(); g += 4) {
      const std::set<int> group(devices.begin() + static_cast<std::ptrdiff_t>(g),
                                devices.begin() + static_cast<std::ptrdiff_t>(g + 4));
      const int r = devices[g] / 2 % 2;  // device (stage x dp + r) x tp + j
      EXPECT_EQ(group, (std::set<int>{2 * r, 2 * r + 1, 4 + 2 * r, 5 + 2 * r})) << "group " << g / 4;
    }
  }
  // The vocabulary ops take a quarter of the 64 rows each; the layers stay on their stage's devices.
  for (const plan::SubOp* s : testing::parts_of(p, "lm_head"))
    if (s->live) {
      EXPECT_EQ(s->outputs.front().local_shape().dims.back(), 64 / 4) << s->name;
    }
  for (const auto& [op, stage] : {std::pair{"encoder.layers.0.mlp.fc1", 0}, std::pair{"encoder.layers.1.attn.q", 0},
                                  std::pair{"decoder.layers.1.mlp.fc2", 1}, std::pair{"decoder.layers.0.cross_attn.q", 1}})
    for (int d : devices_of_op(p, op)) EXPECT_EQ(d / 4, stage) << op << " on device " << d;
  // The table's optimizer step is spread with it.
  const std::vector<int> step = devices_of_op(p, "shared.weight.sgd");
  EXPECT_EQ(std::set<int>(step.begin(), step.end()).size(), 8U);
}

TEST(Interlaced, TrainsAsOneDeviceOnT5AndMbart) {
  // The materialized plan is checked (program order and collectives: a deadlock is an error) and run.
  for (const auto& [preset, tp, pp] : {std::tuple{"t5-3.9b", 1, 2}, std::tuple{"t5-3.9b", 2, 2},
                                       std::tuple{"t5-3.9b", 1, 4}, std::tuple{"mbart-4.7b", 2, 2},
                                       std::tuple{"mbart-4.7b", 1, 4}}) {
    SCOPED_TRACE(::testing::Message() << preset << " tp " << tp << " pp " << pp);
    testing::expect_exec_trains_as_one_device(deep(preset, 4), "interlaced",
                                              {.tp = tp, .pp = pp, .micro_batches = 4});
  }
  testing::expect_exec_trains_as_one_device(deep("t5-3.9b", 4), "interlaced", {.dp = 2, .pp = 2, .micro_batches = 2});
}

TEST(Interlaced, OrderSearchedOnStageCostsTrainsAsOneDevice) {
  // With op_seconds (here training FLOPs, the head weighed from nothing to 1000x) the order is searched
  // on the stages' and shared blocks' costs (plan/interlaced_schedule.h); the materialized plan's check
  // finds no deadlock and it trains as one device does.
  const ir::Graph& graph = deep("t5-3.9b", 4);
  const auto flops = training_flops(graph, ops::builtin_ops());
  ASSERT_TRUE(flops);
  for (const auto& [pp, head_weight] : {std::pair{2, 1.0}, std::pair{4, 0.0}, std::pair{4, 1.0}, std::pair{4, 1e3}}) {
    SCOPED_TRACE(::testing::Message() << "pp " << pp << ", head x " << head_weight);
    ParallelConfig config{.pp = pp, .micro_batches = 4, .recompute = Recompute::full};
    config.op_seconds = *flops;
    for (const ir::Op& op : graph.ops)
      if (op.name == "lm_head") config.op_seconds[op.id.index()] *= head_weight;
    testing::expect_exec_trains_as_one_device(graph, "interlaced", config);
  }
}

TEST(Interlaced, EveryBlockRunsAfterTheBlockBeforeIt) {
  // Order completion runs a device's ready sub-ops by program position. A decoder stage's cross-attention
  // keys and values read the encoder's output, not the stage's input, so unless every sub-op of a stage
  // block is ordered after the block before it, the next micro-batch's keys and values (an earlier layer in
  // the program) are hoisted into the block being run, and the device waits there for the encoder's next
  // output: a stall the searched order does not have (nnScaler Fig. 8, t5-21b on 16 GPUs: the last stage
  // waited 0.22 s inside a forward); so would a lookup's backward, which the searched order runs after the
  // device's last backward. Along each device's completed order, the forwards of the staged layers come
  // micro-batch after micro-batch, and the lookups' backwards after every staged backward.
  const ir::Graph& graph = deep("t5-3.9b", 4);
  const auto flops = training_flops(graph, ops::builtin_ops());
  ASSERT_TRUE(flops);
  for (const auto& [pp, micro_batches] : {std::pair{4, 4}, std::pair{2, 4}}) {
    SCOPED_TRACE(::testing::Message() << "pp " << pp << ", " << micro_batches << " micro-batches");
    ParallelConfig config{.pp = pp, .micro_batches = micro_batches};
    config.op_seconds = *flops;
    const plan::Plan p = interlaced_plan(graph, config);
    const auto order = plan::complete_order(p, pp);
    ASSERT_TRUE(order) << order.error().to_string();
    for (int d = 0; d < pp; ++d) {
      int latest = -1, lookup_backwards = 0;
      std::string latest_name;
      for (plan::SubOpId id : order->per_device[static_cast<std::size_t>(d)]) {
        const plan::SubOp& s = p.sub_op(id);
        const ir::Op& op = graph.ops[s.op.index()];
        if (op.name.ends_with("embed_tokens.backward")) ++lookup_backwards;
        if (op.pass == ir::Pass::backward && staged_micro_batch(s, op.name, micro_batches) >= 0) {
          EXPECT_EQ(lookup_backwards, 0) << "device " << d << ": " << s.name << " runs after a lookup's backward";
        }
        if (op.pass != ir::Pass::forward) continue;
        const int m = staged_micro_batch(s, op.name, micro_batches);
        if (m < 0) continue;
        EXPECT_GE(m, latest) << "device " << d << ": " << s.name << " runs after " << latest_name;
        if (m > latest) latest = m, latest_name = s.name;
      }
      EXPECT_EQ(latest, micro_batches - 1) << "device " << d;
    }
  }
}

// The note apply_policy leaves for the job's description, for `config`.
std::string order_note(const ir::Graph& graph, const ParallelConfig& config) {
  auto made = plan::make_plan(graph, ops::builtin_ops());
  EXPECT_TRUE(made) << made.error().to_string();
  PolicyNotes notes;
  const auto applied = apply_policy(*made, "interlaced", config, ops::builtin_ops(), &notes);
  EXPECT_TRUE(applied) << applied.error().to_string();
  return notes.schedule;
}


TEST(Interlaced, HeldMicroBatchesBoundedByMemory) {
  // With op_bytes each stage may hold what its headroom admits: one byte held per op and a device of
  // 1 TiB admit every micro-batch, more than the count cap (1F1B's peak, 4 on pp 4) without op_bytes,
  // and with the head at 0.3x its FLOPs more H's per barrier; a device of one byte keeps 1F1B's own
  // holds. The roomy order's plan (no deadlock in its check) trains as one device does.
  auto forward = models::build_model("t5-3.9b", {.batch = 8, .dtype = ir::DType::f32, .layers = 4, .shrink = true});
  ASSERT_TRUE(forward) << forward.error().to_string();
  auto built = ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::sgd});
  ASSERT_TRUE(built) << built.error().to_string();
  const ir::Graph& graph = *built;
  const auto flops = training_flops(graph, ops::builtin_ops());
  ASSERT_TRUE(flops);
  ParallelConfig config{.pp = 4, .micro_batches = 8, .recompute = Recompute::full};
  config.op_seconds = *flops;
  const std::string counted = order_note(graph, config);
  EXPECT_NE(counted.find("holding 4/3/2/1 micro-batches (count caps 4/4/4/4)"), std::string::npos) << counted;
  config.op_bytes = {.held = std::vector<std::int64_t>(graph.ops.size(), 1),
                     .state = std::vector<std::int64_t>(graph.ops.size(), 0),
                     .device = std::int64_t{1} << 40};
  const std::string roomy = order_note(graph, config);
  EXPECT_NE(roomy.find("holding 8/"), std::string::npos) << roomy;
  EXPECT_NE(roomy.find("(memory caps 8/8/8/8)"), std::string::npos) << roomy;
  for (const ir::Op& op : graph.ops)
    if (op.name == "lm_head") config.op_seconds[op.id.index()] *= 0.3;
  const std::string grouped = order_note(graph, config);
  EXPECT_EQ(grouped.find("H in groups of 1,"), std::string::npos) << grouped;
  EXPECT_NE(grouped.find("H in groups of"), std::string::npos) << grouped;
  testing::expect_exec_trains_as_one_device(graph, "interlaced", config);
  config.op_bytes.device = 1;
  const std::string tiny = order_note(graph, config);
  EXPECT_NE(tiny.find("holding 4/3/2/1 micro-batches (memory caps 4/3/2/1)"), std::string::npos) << tiny;
  // A backward block's transient: a layer that writes more than it holds (its recomputation writes it
  // again) takes that from its stage's headroom. Layer 0 (stage 0) writing a whole device leaves stage 0
  // no room beyond 1F1B's own holds; the other stages keep theirs.
  config.op_bytes.device = std::int64_t{1} << 40;
  config.op_bytes.working.assign(graph.ops.size(), 1);
  const std::vector<int> layer = layer_ordinals(graph);
  for (const ir::Op& op : graph.ops)
    if (layer[op.id.index()] == 0) config.op_bytes.working[op.id.index()] = std::int64_t{1} << 40;
  const std::string transient = order_note(graph, config);
  EXPECT_NE(transient.find("(memory caps 4/8/8/8)"), std::string::npos) << transient;
  config.op_bytes.working.clear();
  // Bytes not one per op are no bytes: the count cap.
  config.op_bytes.held.pop_back();
  EXPECT_NE(order_note(graph, config).find("(count caps 4/4/4/4)"), std::string::npos);
}

TEST(Interlaced, LayoutFindsTheTiedTable) {
  const plan::Plan fresh = plan::make_plan(deep("t5-3.9b", 2), ops::builtin_ops()).value();
  const auto layout = interlaced_layout(fresh, 4);
  ASSERT_TRUE(layout) << layout.error().to_string();
  EXPECT_EQ(fresh.graph->tensor(layout->table).name, "shared.weight");
  EXPECT_EQ(layout->tensor_dims[layout->table.index()], 0);
  int lookups = 0, heads = 0;
  for (const ir::Op& op : fresh.graph->ops) {
    const SharedRole role = layout->roles[op.id.index()];
    lookups += role == SharedRole::embedding;
    heads += role == SharedRole::head;
    if (role != SharedRole::none && op.name != "loss") {
      EXPECT_TRUE(layout->splits[op.id.index()]) << op.name;
    }
  }
  EXPECT_EQ(lookups, 2);  // encoder and decoder; T5's relative-position tables are not the shared table
  EXPECT_EQ(heads, 4);    // lm_head, loss_shift, loss_parts, loss
}

TEST(Interlaced, SharedOpsWeighOnNoStage) {
  // The shared ops run on every device, so however much they cost, the staged layers are cut as if they
  // cost nothing; megatron, which keeps the head on the last stage, gives that stage fewer layers.
  const ir::Graph& graph = deep("t5-3.9b", 8);
  const auto flops = training_flops(graph, ops::builtin_ops());
  ASSERT_TRUE(flops);
  for (const double head_weight : {0.0, 1.0, 1e3}) {
    SCOPED_TRACE(head_weight);
    ParallelConfig config{.pp = 2, .micro_batches = 2};
    config.op_seconds = *flops;
    for (const ir::Op& op : graph.ops)
      if (op.name == "lm_head" || op.name == "encoder.embed_tokens") config.op_seconds[op.id.index()] *= head_weight;
    const plan::Plan p = interlaced_plan(graph, config);
    std::map<int, std::set<std::string>> layers_on;  // device -> layers
    for (const plan::SubOp& s : p.sub_ops) {
      const ir::Op& op = graph.ops[s.op.index()];
      if (s.live && op.pass == ir::Pass::forward && !layer_of(op.name).empty())
        layers_on[s.device].insert(std::string(layer_of(op.name)));
    }
    EXPECT_EQ(layers_on[0].size() + layers_on[1].size(), 8U);
    static std::map<int, std::set<std::string>> first;
    if (head_weight == 0.0) first = layers_on;
    EXPECT_EQ(layers_on, first);
  }
  ParallelConfig megatron_config{.pp = 2, .micro_batches = 2};
  megatron_config.op_seconds = *flops;
  for (const ir::Op& op : graph.ops)
    if (op.name == "lm_head") megatron_config.op_seconds[op.id.index()] *= 1e3;
  auto stages = megatron_stages(*plan::make_plan(graph, ops::builtin_ops()), megatron_config);
  ASSERT_TRUE(stages);
  std::set<std::string> last;
  for (const ir::Op& op : graph.ops)
    if ((*stages)[op.id.index()] == 1 && !layer_of(op.name).empty()) last.insert(std::string(layer_of(op.name)));
  EXPECT_EQ(last.size(), 1U);  // a head 1000x its FLOPs leaves the last stage one layer
}

TEST(Interlaced, Errors) {
  expect_mentions(apply_error("swin-1.8b", "interlaced", {.pp = 2, .micro_batches = 2}),
                  {"no token embedding", "'embedding' op", "'megatron'"});
  expect_mentions(apply_error("llama3-8b", "interlaced", {.pp = 2, .micro_batches = 2}),
                  {"no LM head", "embed_tokens.weight", "not tied"});
  {
    auto made = plan::make_plan(deep("t5-3.9b", 6), ops::builtin_ops());
    ASSERT_TRUE(made);
    const auto three = apply_policy(*made, "interlaced", {.pp = 3, .micro_batches = 3});
    ASSERT_FALSE(three);
    expect_mentions(three.error(), {"64 rows of embedding table 'shared.weight'", "pp x tp = 3", "--vocab-multiple"});
  }
  expect_mentions(apply_error("t5-3.9b", "interlaced", {.pp = 2, .micro_batches = 2, .virtual_stages = 2}),
                  {"does not combine with the interleaved 1F1B schedule"});
  expect_mentions(apply_error("t5-3.9b", "interlaced", {.pp = 2, .micro_batches = 2, .schedule = plan::ScheduleKind::gpipe}),
                  {"does not combine with the gpipe schedule"});
  expect_mentions(apply_error("t5-3.9b", "interlaced", {.zero = 1}), {"does not use ZeRO"});
}

}  // namespace
}  // namespace loom::policy
