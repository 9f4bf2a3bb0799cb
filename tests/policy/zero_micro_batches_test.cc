// ZeRO-2 and -3 with gradient accumulation keep gradients partitioned (DeepSpeed): each micro-batch's
// partial gradients are reduce-scattered into the dp ranks' partitions as soon as every rank has
// produced them, and added up there. Checked with cost::memory_usage's breakdown by role at each
// device's peak, against ZeRO-1 (which accumulates whole gradients) and against Rajbhandari et al.'s
// 16 Psi / n of model state, and by the interpreter (the step trains as one device and closes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <variant>

#include "loom/cost/memory_model.h"
#include "loom/plan/residence.h"
#include "policy_test_support.h"
#include "testing/tied_gpt.h"

namespace loom::policy {
namespace {

using exec::testing::policy_plan;

// The AdamW training graph of a shrunk preset with `layers` layers and a batch of `batch` (in bf16, with
// fp32 master weights and moments).
ir::Graph training_graph(const std::string& preset, std::int64_t layers, std::int64_t batch, ir::DType dtype) {
  auto forward = models::build_model(preset, {.batch = batch, .dtype = dtype, .layers = layers, .shrink = true});
  EXPECT_TRUE(forward) << forward.error().to_string();
  if (!forward) return {};
  auto training = ir::build_training_graph(*forward, ops::builtin_ops(), {});
  EXPECT_TRUE(training) << training.error().to_string();
  return training.value_or(ir::Graph{});
}

std::int64_t parameter_count(const ir::Graph& graph) {
  std::int64_t n = 0;
  for (const ir::FullTensor& t : graph.tensors)
    if (plan::persists(graph, t.id) && t.role == ir::TensorRole::parameter) n += t.shape.numel();
  return n;
}

// The most parameters any one layer has (parameters named "layers.<i>.").
std::int64_t largest_layer(const ir::Graph& graph) {
  std::map<std::string, std::int64_t> layers;
  for (const ir::FullTensor& t : graph.tensors)
    if (plan::persists(graph, t.id) && t.role == ir::TensorRole::parameter && t.name.starts_with("layers."))
      layers[t.name.substr(0, t.name.find('.', 7))] += t.shape.numel();
  std::int64_t most = 0;
  for (const auto& [name, n] : layers) most = std::max(most, n);
  return most;
}

// Model state held at a device's peak: the parameters, gradients and optimizer states in memory then.
std::int64_t model_state_at_peak(const cost::DeviceMemory& d) {
  return d.at_peak[ir::TensorRole::parameter] + d.at_peak[ir::TensorRole::gradient] +
         d.at_peak[ir::TensorRole::optimizer_state];
}

struct Stage {
  cost::DeviceMemory memory;
  int reduce_scatters = 0;
};

Stage zero_stage(const ir::Graph& graph, int stage, const ParallelConfig& base) {
  ParallelConfig config = base;
  config.zero = stage;
  const auto p = policy_plan(graph, "zero", config);
  Stage s{cost::memory_usage(p->exec).devices.at(0), 0};
  s.reduce_scatters = p->materialize_stats.collectives.contains("reduce-scatter") ? p->materialize_stats.collectives.at("reduce-scatter") : 0;
  std::printf("zero-%d dp %d, %d micro-batches: peak %lld B (%s), %d reduce-scatters\n", stage, config.dp,
              config.micro_batches, static_cast<long long>(s.memory.peak_bytes), s.memory.at_peak.to_string().c_str(),
              s.reduce_scatters);
  return s;
}

TEST(ZeroMicroBatches, Stage2HoldsLessGradientThanStage1) {
  for (const char* preset : {"llama3-8b", "gpt3-125m"}) {
    SCOPED_TRACE(preset);
    const ir::Graph graph = training_graph(preset, 4, 16, ir::DType::bf16);
    const ParallelConfig config{.dp = 4, .micro_batches = 4};
    const Stage one = zero_stage(graph, 1, config), two = zero_stage(graph, 2, config);
    EXPECT_LT(two.memory.at_peak[ir::TensorRole::gradient], one.memory.at_peak[ir::TensorRole::gradient]);
    EXPECT_LT(two.memory.peak_bytes, one.memory.peak_bytes);
    EXPECT_EQ(two.memory.model_state, zero_stage(graph, 2, {.dp = 4}).memory.model_state);
  }
}

// LLaMA (untied) over n = 4 ranks with 4 micro-batches, bf16 weights with fp32 master copies and AdamW
// moments: 16 Psi / n of model state kept between steps, as with one micro-batch. At the peak, add what
// is in flight: one layer's parameters gathered (2 bytes each), one layer's gradient before its
// reduce-scatter (2 bytes each), and the partition's running sums of the micro-batches' gradients added
// pairwise (a sum of micro-batches 0 and 1 beside micro-batch 2's, one more gradient partition, 2 Psi / n).
TEST(ZeroMicroBatches, Stage3HoldsSixteenPsiOverN) {
  const ir::Graph graph = training_graph("llama3-8b", 8, 16, ir::DType::bf16);
  const std::int64_t psi = parameter_count(graph), layer = largest_layer(graph);
  const int n = 4;
  const Stage three = zero_stage(graph, 3, {.dp = n, .micro_batches = 4});
  EXPECT_EQ(three.memory.model_state.total() * n, 16 * psi);
  const std::int64_t held = model_state_at_peak(three.memory);
  const std::int64_t bound = (16 + 2) * psi / n + 2 * 2 * layer;
  std::printf("zero-3: %lld B of model state at the peak; 16 Psi / n = %lld B, bound %lld B (Psi %lld, largest layer "
              "%lld)\n",
              static_cast<long long>(held), static_cast<long long>(16 * psi / n), static_cast<long long>(bound),
              static_cast<long long>(psi), static_cast<long long>(layer));
  EXPECT_GE(held * n, 16 * psi);
  EXPECT_LE(held, bound);
}

// One reduce-scatter per parameter, micro-batch and partition group, each of one micro-batch's partial
// gradients.
TEST(ZeroMicroBatches, Stage2ReduceScattersEveryMicroBatch) {
  const ir::Graph graph = training_graph("llama3-8b", 2, 16, ir::DType::bf16);
  const Stage once = zero_stage(graph, 2, {.dp = 4});
  const Stage per_micro_batch = zero_stage(graph, 2, {.dp = 4, .micro_batches = 4});
  EXPECT_EQ(per_micro_batch.reduce_scatters, 4 * once.reduce_scatters);
}

// Point-to-point transfers of the tensors whose names end with `suffix` on `device`: their count, and the
// most value parts any one of them is a part of (a micro-batch's own term is a part of dp x micro-batches).
struct Transfers {
  int count = 0;
  std::int64_t finest = 1;
};
Transfers transfers_of(const exec::ExecPlan& exec, int device, std::string_view suffix) {
  Transfers t;
  const auto note = [&](exec::BufferId id) {
    const plan::SubTensor& piece = exec.buffer(id).piece;
    if (!exec.plan->graph->tensor(piece.tensor).name.ends_with(suffix)) return;
    ++t.count;
    t.finest = std::max(t.finest, piece.value.count);
  };
  for (const exec::Instruction& i : exec.programs[static_cast<std::size_t>(device)]) {
    if (const auto* s = std::get_if<exec::Send>(&i)) note(s->buffer);
    if (const auto* r = std::get_if<exec::Recv>(&i)) note(r->buffer);
  }
  return t;
}

// T5 under pp x tp with micro-batches: every decoder layer's cross-attention writes the encoder output's
// gradient as tp partial sums on a later stage, and the encoder's last stage reads its accumulation split by
// value over tp. Each rank receives one part per box (its own rank's, moved as written), not every part to
// build the whole times its fraction: before (8156d7b) a stage-0 rank received both tp parts of each
// micro-batch's rows (t5-47b, 32 GPUs: 1917 receives of 48 MiB a device a step).
TEST(PipelinePartialSums, EachRankReceivesOnePartOfEachBox) {
  const ir::Graph graph = training_graph("t5-3.9b", 4, 4, ir::DType::f32);
  const ParallelConfig config{.tp = 2, .pp = 2, .micro_batches = 2};
  const auto p = policy_plan(graph, "megatron", config);
  ASSERT_EQ(p->stage, api::Stage::materialized);
  int received = 0;
  for (int device = 0; device < 4; ++device) {
    std::map<std::pair<std::uint32_t, std::string>, int> parts;  // (tensor, box) -> value parts received
    for (const exec::Instruction& i : p->exec.programs[static_cast<std::size_t>(device)])
      if (const auto* r = std::get_if<exec::Recv>(&i)) {
        const plan::SubTensor& piece = p->exec.buffer(r->buffer).piece;
        if (!p->exec.plan->graph->tensor(piece.tensor).name.starts_with("encoder.final_dropout.grad")) continue;
        ++received;
        std::string box;
        for (const plan::IndexRange& range : piece.box)
          box += std::to_string(range.start) + ":" + std::to_string(range.stop) + ",";
        const int times = ++parts[std::pair(piece.tensor.value, box)];
        EXPECT_EQ(times, 1) << "device " << device << " receives a second part of " << box;
      }
  }
  EXPECT_GT(received, 0);  // the gradient crosses the stages: else the test checks nothing
  testing::expect_exec_trains_as_one_device(graph, "megatron", config);
}

// DeepSpeed's ZeRO-3 column of nnScaler's Fig. 7 (Swin, tp x dp, micro-batches): the relative-position
// bias is computed whole from its tp-replicated table on every tp rank, and each tp rank's attention
// writes its heads' rows of the bias gradient, a batch-less partial sum per micro-batch and dp rank. Each
// device adds its micro-batches' terms into one running sum and the tp ranks exchange those sums once, so
// a device's transfers of the bias gradient do not grow with the micro-batches and none carries one
// micro-batch's term. Before the running sums (057c808) every device received every micro-batch's raw
// term of every dp and tp rank (swin-27b on 32 GPUs: 6944 transfers of 8.5 GiB a device a step).
TEST(ZeroMicroBatches, Stage3SwinBiasGradientStaysOnItsRank) {
  // Swin's relative-position bias is split by heads as its attention reads it (tensor_parallel.h), so the
  // gradient of the [heads, window, window] bias never moves, whatever the micro-batches: only the small
  // table's gradient is reduced. (Replicated over tp, each device once received every micro-batch's term
  // from every rank: 6944 sends a step on swin-27b.)
  const ir::Graph graph = training_graph("swin-1.8b", 0, 16, ir::DType::f32);
  const int dp = 2;
  for (const int micro_batches : {2, 4}) {
    SCOPED_TRACE(micro_batches);
    const ParallelConfig config{.dp = dp, .tp = 2, .micro_batches = micro_batches, .zero = 3};
    const auto p = policy_plan(graph, "megatron", config);
    ASSERT_EQ(p->stage, api::Stage::materialized);
    for (int device = 0; device < dp * 2; ++device)
      EXPECT_EQ(transfers_of(p->exec, device, "relative_position_bias.permute.grad").count, 0) << "device " << device;
  }
  testing::expect_exec_trains_as_one_device(graph, "megatron", {.dp = dp, .tp = 2, .micro_batches = 4, .zero = 3});
}

TEST(ZeroMicroBatches, TrainAsOneDevice) {
  for (const char* preset : {"gpt3-125m", "llama3-8b"}) {
    const ir::Graph graph = training_graph(preset, 2, 16, ir::DType::f32);
    for (int stage : {2, 3})
      for (int micro_batches : {2, 4})
        testing::expect_exec_trains_as_one_device(graph, "zero",
                                                  {.dp = 2, .micro_batches = micro_batches, .zero = stage});
    testing::expect_exec_trains_as_one_device(graph, "megatron", {.dp = 2, .tp = 2, .micro_batches = 2, .zero = 2});
    testing::expect_exec_trains_as_one_device(graph, "megatron", {.dp = 2, .tp = 2, .micro_batches = 2, .zero = 3});
  }
  // Three micro-batches: their partition sums are added at once, not pairwise.
  const ir::Graph graph = training_graph("llama3-8b", 2, 12, ir::DType::f32);
  testing::expect_exec_trains_as_one_device(graph, "zero", {.dp = 2, .micro_batches = 3, .zero = 2});
  testing::expect_exec_trains_as_one_device(graph, "zero", {.dp = 2, .micro_batches = 3, .zero = 3});
  // The tied GPT under dp x tp with ZeRO.
  const ir::Graph tied = testing::tied_gpt(true);
  testing::expect_exec_trains_as_one_device(tied, "megatron", {.dp = 2, .tp = 2, .micro_batches = 2, .zero = 2});
}

}  // namespace
}  // namespace loom::policy
