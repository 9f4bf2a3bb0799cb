// The memory model on a hand-built ExecPlan (exact peaks), the OOM message, and the analytic model
// state of data and tensor parallelism on a shrunk GPT-3 with mixed-precision AdamW.
#include "loom/cost/memory_model.h"

#include <gtest/gtest.h>

#include <map>

#include "../exec/exec_test_plans.h"
#include "testing/policy_plans.h"
#include "loom/ir/graph_stats.h"

namespace loom::cost {
namespace {

using ir::TensorRole;

TEST(MemoryModel, HandBuiltDataParallelPeak) {
  // Device k of data_parallel(2): x[k] is 6x8 f32 (192 B), w 8x8 (256 B), fc[k] and ones[k] 192 B each,
  // the loss part and the all-reduced loss 4 B each. Live bytes after each instruction:
  //   load x 192, load w 448, fc 640, free x 448, loss 452, ones 644, all-reduce 648, free fc 456.
  const auto f = exec::testing::data_parallel(2);
  const MemoryReport report = memory_usage(f->exec);
  ASSERT_EQ(report.devices.size(), 2u);
  for (const DeviceMemory& d : report.devices) {
    SCOPED_TRACE(d.device);
    EXPECT_EQ(d.peak_bytes, 648);
    EXPECT_EQ(d.peak_instruction, 6u);
    EXPECT_EQ(d.at_peak[TensorRole::parameter], 256);
    EXPECT_EQ(d.at_peak[TensorRole::activation], 192 + 4 + 192 + 4);
    EXPECT_EQ(d.at_peak[TensorRole::input], 0);
    EXPECT_EQ(d.at_peak.total(), d.peak_bytes);
    EXPECT_EQ(d.final_bytes, 456);
    EXPECT_EQ(d.model_state, (ModelState{.parameter_bytes = 256, .gradient_bytes = 0, .optimizer_state_bytes = 0}));
  }
  EXPECT_EQ(report.max_device(), 0);
}

TEST(MemoryModel, OutOfMemoryNamesTheDevicesAndBreakdown) {
  const auto f = exec::testing::data_parallel(2);
  const MemoryReport report = memory_usage(f->exec);
  cluster::GpuSpec gpu{.name = "tiny-gpu", .memory_bytes = 648};
  EXPECT_TRUE(check_fits(report, gpu));
  gpu.memory_bytes = 600;
  const auto fits = check_fits(report, gpu);
  ASSERT_FALSE(fits);
  const std::string& m = fits.error().message;
  EXPECT_NE(m.find("out of memory: 2 of 2 devices need more than the tiny-gpu's 600 B"), std::string::npos) << m;
  EXPECT_NE(m.find("device 1 peaks at 648 B (instruction 6): activation 392 B, parameter 256 B"), std::string::npos)
      << m;
  EXPECT_FALSE(fits.error().hint.empty());
}

TEST(MemoryModel, FormatsBytes) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(80.0 * (1 << 30)), "80.00 GiB");
}

// The shrunk GPT-3 125M training graph: bf16 weights and activations, AdamW with fp32 master weights.
const ir::Graph& gpt() { return exec::testing::shrunk_training_graph("gpt3-125m", ir::DType::bf16); }

std::unique_ptr<exec::testing::PolicyPlan> planned(std::string_view policy, const policy::ParallelConfig& config) {
  return exec::testing::policy_plan(gpt(), policy, config);
}

TEST(MemoryModel, DataParallelReplicatesTheModelState) {
  auto stats = ir::compute_stats(gpt(), ops::builtin_ops());
  ASSERT_TRUE(stats) << stats.error().to_string();
  // Mixed-precision Adam: 2 (bf16 weight) + 2 (bf16 gradient) + 12 (fp32 master, two moments) bytes each.
  EXPECT_DOUBLE_EQ(stats->parameter_bytes, 2.0 * static_cast<double>(stats->parameter_count));
  EXPECT_DOUBLE_EQ(stats->optimizer_state_bytes, 12.0 * static_cast<double>(stats->parameter_count));
  const auto p = planned("dp", {.dp = 4});
  ASSERT_NE(p->exec.plan, nullptr);
  const MemoryReport report = memory_usage(p->exec);
  ASSERT_EQ(report.devices.size(), 4u);
  for (const DeviceMemory& d : report.devices) {
    SCOPED_TRACE(d.device);
    EXPECT_EQ(static_cast<double>(d.model_state.parameter_bytes), stats->parameter_bytes);
    EXPECT_EQ(static_cast<double>(d.model_state.gradient_bytes), stats->gradient_bytes);
    EXPECT_EQ(static_cast<double>(d.model_state.optimizer_state_bytes), stats->optimizer_state_bytes);
    EXPECT_EQ(d.model_state.total(), 16 * stats->parameter_count);
    EXPECT_GE(d.peak_bytes, d.model_state.parameter_bytes + d.model_state.optimizer_state_bytes);
    EXPECT_EQ(d.peak_bytes, report.devices[0].peak_bytes);  // symmetric devices
  }
}

TEST(MemoryModel, TensorParallelHalvesTheSplitWeights) {
  const auto p = planned("tp", {.tp = 2});
  const ir::Graph& g = gpt();
  // Which model-state tensors tensor parallelism splits, read off the plan (not the ExecPlan): no part
  // on device 0 reads the whole tensor. (The tied embedding stays whole: the LM head reads all of it.)
  // Gradients follow the optimizer step: split where the step on device 0 updates part of the weight
  // (the embedding's step is vocabulary parallel even though its tied head reads the whole table).
  std::map<std::uint32_t, bool> read, whole, stepped_whole;
  for (plan::SubOpId id : p->plan.live_sub_ops()) {
    const plan::SubOp& s = p->plan.sub_op(id);
    if (s.device != 0) continue;
    for (const plan::SubTensor& in : s.inputs) {
      read[in.tensor.value] = true;
      if (in.numel() == g.tensor(in.tensor).shape.numel()) {
        whole[in.tensor.value] = true;
        if (p->plan.op_of(id).pass == ir::Pass::optimizer) stepped_whole[in.tensor.value] = true;
      }
    }
  }
  double expected_params = 0, expected_states = 0, expected_gradients = 0, split_bytes = 0, total = 0;
  for (const ir::FullTensor& t : g.tensors) {
    if (t.updates.valid() || (t.role != TensorRole::parameter && t.role != TensorRole::optimizer_state)) continue;
    EXPECT_TRUE(read.contains(t.id.value)) << t.name;
    const double bytes = static_cast<double>(t.bytes());
    const double held = whole.contains(t.id.value) ? bytes : bytes / 2;
    if (t.role == TensorRole::parameter) {
      total += bytes;
      if (!whole.contains(t.id.value)) split_bytes += bytes;
      expected_params += held;
      expected_gradients += stepped_whole.contains(t.id.value) ? bytes : bytes / 2;  // bf16, as the weight
    } else {
      expected_states += held;
    }
  }
  EXPECT_GT(split_bytes, 0.5 * total);  // the attention and MLP weights dominate
  ASSERT_NE(p->exec.plan, nullptr);
  const MemoryReport report = memory_usage(p->exec);
  ASSERT_EQ(report.devices.size(), 2u);
  for (const DeviceMemory& d : report.devices) {
    SCOPED_TRACE(d.device);
    EXPECT_EQ(static_cast<double>(d.model_state.parameter_bytes), expected_params);
    EXPECT_EQ(static_cast<double>(d.model_state.optimizer_state_bytes), expected_states);
    EXPECT_EQ(static_cast<double>(d.model_state.gradient_bytes), expected_gradients);
    EXPECT_LT(static_cast<double>(d.model_state.parameter_bytes), total);
  }
}

}  // namespace
}  // namespace loom::cost
