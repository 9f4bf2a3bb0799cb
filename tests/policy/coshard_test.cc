// Coshard (policy/coshard.h): the regions it finds, the plan megatron builds with it (C parts per device
// per region, the chains' order edges, every part recomputed), the plan materialized, checked and run
// exactly as one device, its activation peak falling with C at the price of recomputation, random
// (tp, C, layers) plans on a shrunk GPT, and the errors.
#include "loom/policy/coshard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>

#include "loom/api/verify_job.h"
#include "loom/exec/instruction_buffers.h"
#include "loom/plan/recompute.h"
#include "policy_test_support.h"

namespace loom::policy {
namespace {

using testing::apply_error;
using testing::expect_mentions;
using testing::parts_of;
using testing::planned;
using testing::shrunk;

ParallelConfig with_coshard(ParallelConfig config, int parts, std::optional<LayerRange> layers = {},
                            CoshardOps ops = {}) {
  config.coshard = {.parts = parts, .layers = layers, .ops = ops};
  return config;
}

std::vector<std::string> names(const plan::Plan& p, const std::vector<ir::OpId>& ops) {
  std::vector<std::string> result;
  for (ir::OpId id : ops) result.push_back(p.graph->op(id).name);
  return result;
}

CoshardPlan regions_of(std::string_view preset, const CoshardConfig& config, int tp = 1) {
  const plan::Plan p = plan::make_plan(shrunk(preset).graph, ops::builtin_ops()).value();
  auto found = coshard_plan(p, config, tp);
  EXPECT_TRUE(found) << found.error().to_string();
  return found.value_or(CoshardPlan{});
}

std::int64_t all_reduces(const exec::ExecPlan& exec) {
  std::int64_t count = 0;
  for (const auto& program : exec.programs)
    for (const exec::Instruction& instruction : program)
      if (const auto* c = std::get_if<exec::Collective>(&instruction)) count += c->kind == comm::Primitive::all_reduce;
  return count;
}

TEST(CoshardPlan, RegionsAreEachLayersAttentionHeadsAndMlpWidth) {
  const plan::Plan gpt = plan::make_plan(shrunk("gpt3-125m").graph, ops::builtin_ops()).value();
  const CoshardPlan all = regions_of("gpt3-125m", {.parts = 2});
  ASSERT_EQ(all.regions.size(), 4u);  // 2 layers x (attention, MLP)
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(all.regions[r].attention, r % 2 == 0);
    EXPECT_EQ(all.regions[r].layer, static_cast<int>(r / 2));
  }
  EXPECT_EQ(names(gpt, all.regions[0].sources), std::vector<std::string>{"layers.0.attn.qkv"});
  EXPECT_EQ(names(gpt, all.regions[0].sinks), std::vector<std::string>{"layers.0.attn.out"});
  EXPECT_EQ(names(gpt, all.regions[3].sources), std::vector<std::string>{"layers.1.mlp.fc1"});
  EXPECT_EQ(names(gpt, all.regions[3].sinks), std::vector<std::string>{"layers.1.mlp.fc2"});
  // Norms, residual adds, embeddings and the LM head keep their tensor-parallel form.
  for (const char* outside : {"layers.0.ln1", "layers.0.attn_residual", "wte", "lm_head"})
    if (const ir::Op* op = testing::op_named(gpt, outside)) {
      EXPECT_FALSE(all.identifiers[op->id.index()]) << outside;
    }

  // LLaMA's separate q, k, v and gate, up projections are the sources of one region each.
  const plan::Plan llama = plan::make_plan(shrunk("llama3-8b").graph, ops::builtin_ops()).value();
  const CoshardPlan some =
      regions_of("llama3-8b", {.parts = 2, .layers = LayerRange{1, -1}, .ops = {.attention = true, .mlp = false}});
  ASSERT_EQ(some.regions.size(), 1u);
  EXPECT_TRUE(some.regions[0].attention);
  EXPECT_EQ(some.regions[0].layer, 1);
  EXPECT_EQ(names(llama, some.regions[0].sources),
            (std::vector<std::string>{"layers.1.attn.q", "layers.1.attn.k", "layers.1.attn.v"}));
  EXPECT_EQ(names(llama, some.regions[0].sinks), std::vector<std::string>{"layers.1.attn.out"});
  const CoshardPlan mlp = regions_of("llama3-8b", {.parts = 2, .layers = LayerRange{0, 1}, .ops = {.attention = false}});
  ASSERT_EQ(mlp.regions.size(), 1u);
  EXPECT_EQ(names(llama, mlp.regions[0].sources), (std::vector<std::string>{"layers.0.mlp.gate", "layers.0.mlp.up"}));
  EXPECT_EQ(names(llama, mlp.regions[0].sinks), std::vector<std::string>{"layers.0.mlp.down"});
  // Off: nothing.
  EXPECT_TRUE(regions_of("gpt3-125m", {.parts = 1}).regions.empty());
}

TEST(Coshard, PartsPerDeviceChainOrderAndRecomputation) {
  constexpr int kTp = 2, kParts = 2;
  const plan::Plan p = planned("gpt3-125m", "megatron", with_coshard({.tp = kTp}, kParts));
  const std::set<std::pair<plan::SubOpId, plan::SubOpId>> orders(p.orders.begin(), p.orders.end());
  for (const std::string layer : {"layers.0", "layers.1"}) {
    SCOPED_TRACE(layer);
    const auto fc1 = parts_of(p, layer + ".mlp.fc1");
    const auto fc2 = parts_of(p, layer + ".mlp.fc2");
    ASSERT_EQ(fc1.size(), std::size_t{kTp * kParts});
    ASSERT_EQ(fc2.size(), std::size_t{kTp * kParts});
    // Parts k*C .. k*C+C-1 on tp rank k: fc1's output features in tp x C contiguous ranges, fc2 writing
    // value parts q of tp x C.
    EXPECT_EQ(testing::devices_of(fc1), (std::vector<int>{0, 0, 1, 1}));
    EXPECT_EQ(testing::devices_of(fc2), (std::vector<int>{0, 0, 1, 1}));
    const std::int64_t width = p.graph->tensor(fc1[0]->outputs[0].tensor).shape[2];
    for (int q = 0; q < kTp * kParts; ++q) {
      const plan::IndexRange& features = fc1[static_cast<std::size_t>(q)]->outputs[0].box[2];
      EXPECT_EQ(features.start, q * width / (kTp * kParts));
      EXPECT_EQ(features.size(), width / (kTp * kParts));
      EXPECT_EQ(fc2[static_cast<std::size_t>(q)]->outputs[0].value, (plan::ValuePart{q, kTp * kParts}));
    }
    for (int k = 0; k < kTp; ++k) {
      // Chain 0's sink before chain 1's source in forward; chain 1's source's backward before chain 0's
      // sink's backward.
      const plan::SubOp& sink0 = *fc2[static_cast<std::size_t>(k * kParts)];
      const plan::SubOp& source1 = *fc1[static_cast<std::size_t>(k * kParts + 1)];
      EXPECT_TRUE(orders.contains({sink0.id, source1.id}));
      EXPECT_TRUE(orders.contains({source1.mirror, sink0.mirror}));
      // Not the other way round, and never across devices.
      EXPECT_FALSE(orders.contains({fc2[static_cast<std::size_t>(k * kParts + 1)]->id,
                                    fc1[static_cast<std::size_t>(k * kParts)]->id}));
    }
    for (const char* op : {".attn.qkv", ".attn.sdpa", ".attn.out", ".mlp.fc1", ".mlp.act", ".mlp.fc2"})
      for (const plan::SubOp* part : parts_of(p, layer + op)) EXPECT_TRUE(plan::is_recomputed(p, part->id)) << part->name;
    for (const char* op : {".ln1", ".attn_residual", ".ln2", ".mlp_residual"})
      for (const plan::SubOp* part : parts_of(p, layer + op)) EXPECT_FALSE(plan::is_recomputed(p, part->id)) << part->name;
  }
  // Every order edge joins two sub-ops of one device.
  for (const auto& [a, b] : p.orders) EXPECT_EQ(p.sub_op(a).device, p.sub_op(b).device);
}

// Materialized, checked and run on simulated devices, the plan trains exactly as one device, with the
// same tensor-parallel all-reduces as Megatron's: each device sums its C partial sums first.
TEST(Coshard, MaterializedPlanTrainsExactlyWithOneAllReducePerRegion) {
  for (const char* preset : {"gpt3-125m", "llama3-8b", "swin-1.8b"}) {
    for (const auto& [tp, parts] : {std::pair{2, 2}, std::pair{1, 4}}) {
      SCOPED_TRACE(std::string(preset) + " tp " + std::to_string(tp) + " coshard " + std::to_string(parts));
      const ir::Graph& graph = exec::testing::shrunk_training_graph(preset, ir::DType::f32);
      const auto plain = exec::testing::policy_plan(graph, "megatron", {.tp = tp});
      const auto job = exec::testing::policy_plan(graph, "megatron", with_coshard({.tp = tp}, parts));
      ASSERT_EQ(job->stage, api::Stage::materialized);
      EXPECT_EQ(all_reduces(job->exec), all_reduces(plain->exec));
      EXPECT_GT(job->materialize_stats.recomputed, 0);
      auto report = api::verify_job(*job, 5);
      ASSERT_TRUE(report) << report.error().to_string();
      EXPECT_LT(report->worst(), 1e-9) << report->comparison.overall.worst;
    }
  }
}

// A traced HuggingFace GPT-2: its GELU is a chain of ops reading one tensor several times, whose gradient
// accumulation is split with the chains (else it would join two chains' backwards: a cycle).
TEST(Coshard, TracedGpt2SplitsGradientAccumulationsWithTheChains) {
  const ir::Graph& graph = testing::traced_gpt2_training_graph();
  for (const ParallelConfig& config :
       {with_coshard({.tp = 2}, 2), with_coshard({.dp = 2, .tp = 2, .micro_batches = 2}, 2), with_coshard({}, 4)}) {
    SCOPED_TRACE(fmt::format("dp {} tp {} coshard {}", config.dp, config.tp, config.coshard.parts));
    const auto job = exec::testing::policy_plan(graph, "megatron", config);
    ASSERT_EQ(job->stage, api::Stage::materialized);
    const int per_device = config.coshard.parts * config.micro_batches;
    const auto accumulation = parts_of(job->plan, "transformer.h.0.mlp.c_fc.view_11.grad.accumulate");
    ASSERT_EQ(accumulation.size(), static_cast<std::size_t>(per_device * config.dp * config.tp));
    for (int d = 0; d < device_count(config); ++d)
      EXPECT_EQ(std::ranges::count(testing::devices_of(accumulation), d), per_device);
    auto report = api::verify_job(*job, 3);
    ASSERT_TRUE(report) << report.error().to_string();
    EXPECT_LT(report->worst(), 1e-9) << report->comparison.overall.worst;
  }
}

// The activation peak of the simulated plan falls with C (one part's activations live at a time), and
// the step costs more compute (each part's forward runs twice).
TEST(Coshard, ActivationPeakFallsWithPartsAndRecomputationCostsCompute) {
  const ir::Graph& graph = exec::testing::shrunk_training_graph("swin-1.8b", ir::DType::f32);
  std::int64_t last_peak = 0;
  double last_compute = 0;
  for (int parts : {1, 2, 4}) {
    SCOPED_TRACE("coshard " + std::to_string(parts));
    const auto job = exec::testing::policy_plan(graph, "megatron", with_coshard({}, parts));
    ASSERT_TRUE(api::simulate(*job));
    const std::int64_t peak = testing::peak_activation_bytes(job->exec);
    const double compute = job->sim.devices[0].compute;
    std::printf("swin-1.8b (shrunk, f32) coshard %d: activation peak %lld bytes, compute %.6g s\n", parts,
                static_cast<long long>(peak), compute);
    if (parts > 1) {
      EXPECT_LT(peak, last_peak);
      EXPECT_GT(compute, last_compute);
    }
    last_peak = peak;
    last_compute = compute;
  }
}

// Coshard splits what attention holds only where attention holds something per head (nnScaler §5;
// SuperScaler Fig. 12(b)): with eager attention (models::AttentionImpl) the [b h s t] probabilities and
// dropped probabilities of one part of C are live at a time, so C = 4 lowers the activation peak by more than
// one score tensor; the fused op holds no scores, and its peak falls by less (only q, k, v and the output
// split).
TEST(Coshard, SplitsEagerAttentionsScoresNotTheFusedKernels) {
  for (const models::AttentionImpl impl : {models::AttentionImpl::eager, models::AttentionImpl::fused}) {
    SCOPED_TRACE(std::string(models::name(impl)));
    // A small vocabulary, so that the LM head's logits do not set the peak.
    const models::ModelOptions options{
        .batch = 1, .seq = 512, .dtype = ir::DType::f16, .layers = 1, .vocab = 1024, .attention = impl};
    auto forward = models::build_model("gpt3-125m", options);
    ASSERT_TRUE(forward) << forward.error().to_string();
    auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {});
    ASSERT_TRUE(graph) << graph.error().to_string();
    // One [b h s s] tensor: gpt3-125m has 12 heads.
    const std::int64_t score_bytes = std::int64_t{12} * 512 * 512 * ir::size_bytes(ir::DType::f16);
    std::int64_t peak[2] = {};
    for (const int parts : {1, 4}) {
      ParallelConfig config;
      if (parts > 1) config = with_coshard(config, parts, {}, {.attention = true, .mlp = false});
      const auto job = exec::testing::policy_plan(*graph, "megatron", config);
      ASSERT_EQ(job->stage, api::Stage::materialized);
      peak[parts > 1] = testing::peak_activation_bytes(job->exec);
    }
    std::printf("gpt3-125m (1 layer, seq 512, vocabulary 1024, f16, %s attention): activation peak %lld bytes with coshard 1, %lld with "
                "coshard 4 on attention; one score tensor %lld bytes\n",
                std::string(models::name(impl)).c_str(), static_cast<long long>(peak[0]),
                static_cast<long long>(peak[1]), static_cast<long long>(score_bytes));
    if (impl == models::AttentionImpl::eager) {
      EXPECT_LT(peak[1], peak[0] - score_bytes);
    } else {
      EXPECT_GE(peak[1], peak[0] - score_bytes);
    }
  }
}

// Times device 0 computes the sub-op named `name`.
int times_computed(const api::Job& job, std::string_view name) {
  int n = 0;
  for (const exec::Instruction& instruction : job.exec.programs[0])
    if (const auto* c = std::get_if<exec::Compute>(&instruction)) n += job.plan.sub_op(c->sub_op).name == name;
  return n;
}

// Coshard composes with Megatron's full recompute as nested recomputation (plan/recompute.h): the layer
// input is the only checkpoint, so each layer adds one [b, s, h] tensor to the activation peak with C = 4
// as with C = 1 (not three: the attention's and the MLP's summed outputs are summed again from the
// recomputed parts, not kept). A part runs three times: forward, in the layer's recomputation, and once
// more for its own backward (one chain live at a time); without full recompute, twice. Verified exact.
TEST(Coshard, FullRecomputeKeepsOnlyTheLayerInputAsWithoutCoshard) {
  const std::int64_t one_tensor = std::int64_t{256} * 768 * ir::size_bytes(ir::DType::f16);
  std::int64_t per_layer[2] = {};
  for (const int parts : {1, 4}) {
    std::int64_t peak[2] = {};
    for (const int layers : {2, 6}) {
      ParallelConfig config{.recompute = Recompute::full};
      if (parts > 1) config = with_coshard(config, parts);
      const auto job = exec::testing::policy_plan(testing::small_vocab_gpt(layers), "megatron", config);
      ASSERT_EQ(job->stage, api::Stage::materialized);
      peak[layers == 6] = testing::peak_activation_bytes(job->exec);
      if (parts > 1) {
        EXPECT_EQ(times_computed(*job, "layers.0.mlp.fc1[0/4]"), 3);
      }
    }
    per_layer[parts > 1] = (peak[1] - peak[0]) / 4;
    std::printf("gpt3-125m (seq 256, vocabulary 1024, f16) full recompute, coshard %d: activation peak %lld bytes "
                "with 2 layers, %lld with 6; %lld per layer (one [b, s, h] tensor: %lld)\n",
                parts, static_cast<long long>(peak[0]), static_cast<long long>(peak[1]),
                static_cast<long long>(per_layer[parts > 1]), static_cast<long long>(one_tensor));
  }
  EXPECT_EQ(per_layer[0], one_tensor);
  EXPECT_EQ(per_layer[1], per_layer[0]);

  const auto alone = exec::testing::policy_plan(testing::small_vocab_gpt(2), "megatron", with_coshard({}, 4));
  EXPECT_EQ(times_computed(*alone, "layers.0.mlp.fc1[0/4]"), 2);
  for (const char* preset : {"gpt3-125m", "swin-1.8b"}) {
    for (const auto& [tp, parts] : {std::pair{1, 4}, std::pair{2, 2}}) {
      SCOPED_TRACE(fmt::format("{} tp {} coshard {}", preset, tp, parts));
      const ir::Graph& graph = exec::testing::shrunk_training_graph(preset, ir::DType::f32);
      const auto job =
          exec::testing::policy_plan(graph, "megatron", with_coshard({.tp = tp, .recompute = Recompute::full}, parts));
      ASSERT_EQ(job->stage, api::Stage::materialized);
      auto report = api::verify_job(*job, 3);
      ASSERT_TRUE(report) << report.error().to_string();
      EXPECT_LT(report->worst(), 1e-9) << report->comparison.overall.worst;
    }
  }
}

// The most buffers of `tensor` device 0 holds at once over its program.
int most_live(const exec::ExecPlan& exec, std::string_view tensor) {
  std::set<std::uint32_t> live;
  std::size_t most = 0;
  for (const exec::Instruction& instruction : exec.programs[0]) {
    exec::for_each_written(instruction, [&](exec::BufferId id) {
      if (exec.plan->graph->tensor(exec.buffer(id).piece.tensor).name == tensor) live.insert(id.value);
    });
    most = std::max(most, live.size());
    if (const auto* free = std::get_if<exec::Free>(&instruction)) live.erase(free->buffer.value);
  }
  return static_cast<int>(most);
}

// Each of the C parts' backward writes a whole partial sum of the region input's gradient (its column-
// parallel parts each read the whole input): they are added into one running sum as they come, so the
// sum and the newest are alive, and one more while their sum is written: 3 whatever C (summing all when
// read kept C + 1: 5 for C = 4, 9 for C = 8). Verified exact, as every coshard plan.
TEST(Coshard, PartsInputGradientsAreSummedAsTheyCome) {
  const ir::Graph& graph = exec::testing::shrunk_training_graph("swin-1.8b", ir::DType::f32);
  for (const auto& [tp, parts, most] : {std::tuple{1, 4, 3}, std::tuple{1, 8, 3}, std::tuple{2, 2, 3}}) {
    SCOPED_TRACE(fmt::format("tp {} coshard {}", tp, parts));
    const auto job =
        exec::testing::policy_plan(graph, "megatron", with_coshard({.tp = tp}, parts, {}, {.attention = false}));
    ASSERT_EQ(job->stage, api::Stage::materialized);
    EXPECT_EQ(most_live(job->exec, "layers.0.blocks.0.norm2.grad"), most);
    auto report = api::verify_job(*job, 2);
    ASSERT_TRUE(report) << report.error().to_string();
    EXPECT_LT(report->worst(), 1e-9) << report->comparison.overall.worst;
  }
}

// Random (dp, tp, pp, micro-batches, C, layers, op classes) on the shrunk GPT (4 heads, 2 layers): every
// plan whose tp x C divides the heads (attention) and the FFN width (MLP) validates, materializes and
// verifies; the others fail naming the op and the division.
TEST(Coshard, RandomConfigurationsValidateAndVerify) {
  const ir::Graph& graph = exec::testing::shrunk_training_graph("gpt3-125m", ir::DType::f32);
  const auto size_of = [&](std::string_view tensor, std::size_t dim) {
    for (const ir::FullTensor& t : graph.tensors)
      if (t.name == tensor) return t.shape[dim];
    ADD_FAILURE() << "no tensor " << tensor;
    return std::int64_t{1};
  };
  const std::int64_t heads = size_of("layers.0.attn.qkv.view", 2), ffn = size_of("layers.0.mlp.fc1", 2);
  std::mt19937 random(14);
  int verified = 0;
  const auto pick = [&](std::initializer_list<int> values) {
    return *(values.begin() + std::uniform_int_distribution<std::size_t>(0, values.size() - 1)(random));
  };
  for (int i = 0; i < 24; ++i) {
    ParallelConfig config{.dp = pick({1, 2}), .tp = pick({1, 2}), .pp = pick({1, 2})};
    config.micro_batches = config.pp > 1 ? 2 : pick({1, 2});
    const int parts = pick({2, 3, 4});
    const int first = pick({0, 1});
    const std::optional<LayerRange> layers =
        pick({0, 1}) ? std::optional<LayerRange>{} : LayerRange{.first = first, .end = pick({-1, first + 1})};
    const int classes = pick({1, 2, 3});
    config = with_coshard(config, parts, layers, {.attention = (classes & 1) != 0, .mlp = (classes & 2) != 0});
    const std::string what = fmt::format("dp {} tp {} pp {} mb {} coshard {} layers {} ops {}", config.dp, config.tp,
                                         config.pp, config.micro_batches, parts,
                                         layers ? to_string(*layers) : "all", to_string(config.coshard.ops));
    SCOPED_TRACE(what);
    const std::int64_t n = config.tp * parts;
    if ((config.coshard.ops.attention && heads % n != 0) || (config.coshard.ops.mlp && ffn % n != 0)) {
      auto made = plan::make_plan(graph, ops::builtin_ops());
      ASSERT_TRUE(made);
      auto applied = apply_policy(*made, "megatron", config);
      ASSERT_FALSE(applied);
      expect_mentions(applied.error(), {"does not divide", "is split along"});
      continue;
    }
    const auto job = exec::testing::policy_plan(graph, "megatron", config);
    ASSERT_EQ(job->stage, api::Stage::materialized);
    ASSERT_TRUE(plan::validate_plan(job->plan, device_count(config)));
    // The chosen regions' ops have C parts per (micro-batch, dp rank, tp rank); the others none extra.
    const CoshardPlan chosen = coshard_plan(job->plan, config.coshard, config.tp).value();
    for (const ir::Op& op : graph.ops) {
      if (op.pass != ir::Pass::forward || !chosen.identifiers[op.id.index()]) continue;
      EXPECT_EQ(job->plan.parts[op.id.index()].size(),
                static_cast<std::size_t>(config.micro_batches * config.dp * config.tp * parts))
          << op.name;
    }
    auto report = api::verify_job(*job, static_cast<std::uint64_t>(i));
    ASSERT_TRUE(report) << report.error().to_string();
    EXPECT_LT(report->worst(), 1e-9) << report->comparison.overall.worst;
    ++verified;
  }
  EXPECT_GE(verified, 10);  // most draws are plans, not errors
}

TEST(Coshard, PolicyTakesThePapersDefaults) {
  EXPECT_EQ(with_coshard_defaults({}, 8), (CoshardConfig{.parts = 4, .layers = LayerRange{0, 2}, .ops = {}}));
  EXPECT_EQ(with_coshard_defaults({}, 3).layers, (LayerRange{0, 1}));  // at least one layer
  const CoshardConfig given{.parts = 2, .layers = LayerRange{1, 3}, .ops = {.attention = false}};
  EXPECT_EQ(with_coshard_defaults(given, 8), given);
  // Shrunk Swin: 5 layers (blocks), the first cosharded 4 ways.
  const plan::Plan p = planned("swin-1.8b", "coshard", {});
  EXPECT_EQ(parts_of(p, "layers.0.blocks.0.mlp.fc1").size(), 4u);
  EXPECT_EQ(parts_of(p, "layers.0.blocks.0.attn.qkv").size(), 4u);
  EXPECT_EQ(parts_of(p, "layers.1.blocks.0.mlp.fc1").size(), 1u);
  testing::expect_trains_exactly("swin-1.8b", "coshard", {});
}

TEST(Coshard, ErrorsNameTheInputAndTheFix) {
  // C not dividing the heads one tp rank holds.
  expect_mentions(apply_error("gpt3-125m", "megatron", with_coshard({.tp = 2}, 4)),
                  {"coshard 4 with tp 2", "layers.0.attn.qkv.view", "'c'", "4 elements", "8 does not divide 4"});
  // A layer range outside the model.
  expect_mentions(apply_error("gpt3-125m", "megatron", with_coshard({}, 2, LayerRange{1, 5})),
                  {"coshard layers 1:5", "has 2 layers", "0:2"});
  expect_mentions(apply_error("gpt3-125m", "megatron", with_coshard({}, 2, LayerRange{2, -1})), {"has 2 layers"});
  // No tensor-parallel region to split.
  expect_mentions(apply_error("resnet-50", "coshard", {}), {"no tensor-parallel", "resnet-50"});
  // Coshard where it does not apply, or given without its parts.
  expect_mentions(apply_error("gpt3-125m", "dp", with_coshard({}, 2)), {"policy 'dp' does not use coshard"});
  expect_mentions(apply_error("gpt3-125m", "megatron", with_coshard({}, 0, LayerRange{0, 1})), {"coshard is off"});
  expect_mentions(apply_error("gpt3-125m", "coshard", with_coshard({}, 1)), {"policy 'coshard' with 1 part"});
}

TEST(Coshard, LayerRangesAndOpClassesParse) {
  EXPECT_EQ(parse_layer_range("0:4").value(), (LayerRange{0, 4}));
  EXPECT_EQ(parse_layer_range("2:").value(), (LayerRange{2, -1}));
  EXPECT_EQ(parse_layer_range(":3").value(), (LayerRange{0, 3}));
  EXPECT_EQ(to_string(LayerRange{2, -1}), "2:");
  EXPECT_EQ(to_string(LayerRange{0, 4}), "0:4");
  for (const char* bad : {"4", "3:1", "a:2", "1:2:3", "-1:2", "1:1"}) {
    const auto parsed = parse_layer_range(bad);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_NE(parsed.error().hint.find("A:B"), std::string::npos) << bad;
  }
  EXPECT_EQ(parse_coshard_ops("attention").value(), (CoshardOps{.attention = true, .mlp = false}));
  EXPECT_EQ(parse_coshard_ops("mlp, attention").value(), (CoshardOps{}));
  EXPECT_EQ(to_string(CoshardOps{.attention = false}), "mlp");
  for (const char* bad : {"", "conv", "mlp,conv"}) EXPECT_FALSE(parse_coshard_ops(bad)) << bad;
}

}  // namespace
}  // namespace loom::policy
