// ZeRO-3's parameter memory at its peak, by the memory model over materialized plans of a shrunk LLaMA:
// a device holds its 1/dp shard of the weights plus the gathered copies of about one layer at a time,
// gathered for each use and freed after it (Rajbhandari et al. 2020, §5.3; DeepSpeed prefetches one
// layer ahead). Micro-batches gather again in each of their forwards and backwards, and a recomputed
// forward gathers again rather than keeping the forward's copies until the backward. Prefetched gathers
// (exec/passes.h) hold their copies from their start: prefetching costs memory, and the model shows it.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>

#include <fmt/format.h>

#include "testing/policy_plans.h"
#include "loom/cost/memory_model.h"
#include "loom/exec/instruction_buffers.h"
#include "loom/exec/passes.h"
#include "loom/plan/residence.h"

namespace loom::cost {
namespace {

using ir::TensorRole;

constexpr int kLayers = 6;  // deep enough that keeping every layer's gathered weights stands out

// The shrunk LLaMA-3 8B (bf16, AdamW) with kLayers layers and its default batch of 4.
const ir::Graph& llama() {
  static const std::unique_ptr<ir::Graph> graph = [] {
    auto forward = models::build_model("llama3-8b", {.layers = kLayers, .shrink = true});
    EXPECT_TRUE(forward) << forward.error().to_string();
    auto training =
        forward ? ir::build_training_graph(*forward, ops::builtin_ops(), {}) : Expected<ir::Graph>(ir::Graph{});
    EXPECT_TRUE(training) << training.error().to_string();
    return std::make_unique<ir::Graph>(training.value_or(ir::Graph{}));
  }();
  return *graph;
}

// Bytes of the persistent parameters of transformer layer 0, whole (as gathered without tensor parallelism).
std::int64_t layer_parameter_bytes(const ir::Graph& graph) {
  std::int64_t bytes = 0;
  for (const ir::FullTensor& t : graph.tensors)
    if (t.role == TensorRole::parameter && plan::persists(graph, t.id) && t.name.starts_with("layers.0."))
      bytes += t.bytes();
  return bytes;
}

// Per device: the most parameter bytes held at once (as memory_usage counts: from the write to the Free).
std::vector<std::int64_t> peak_parameters(const exec::ExecPlan& exec) {
  const ir::Graph& graph = *exec.plan->graph;
  std::vector<std::int64_t> peaks;
  for (const auto& program : exec.programs) {
    std::vector<char> live(exec.buffers.size(), 0);
    std::int64_t held = 0, peak = 0;
    const auto change = [&](exec::BufferId id, bool alive) {
      const exec::Buffer& b = exec.buffer(id);
      if (graph.tensor(b.piece.tensor).role != TensorRole::parameter || live[id.index()] == static_cast<char>(alive))
        return;
      live[id.index()] = static_cast<char>(alive);
      held += alive ? b.bytes : -b.bytes;
    };
    for (const exec::Instruction& instruction : program) {
      exec::for_each_written(instruction, [&](exec::BufferId id) { change(id, true); });
      if (const auto* free = std::get_if<exec::Free>(&instruction)) change(free->buffer, false);
      peak = std::max(peak, held);
    }
    peaks.push_back(peak);
  }
  return peaks;
}

// All-gathers of parameters on device 0.
int parameter_gathers(const exec::ExecPlan& exec) {
  int count = 0;
  for (const exec::Instruction& i : exec.programs[0])
    if (const auto* c = std::get_if<exec::Collective>(&i);
        c != nullptr && c->kind == comm::Primitive::all_gather &&
        exec.plan->graph->tensor(exec.buffer(c->input).piece.tensor).role == TensorRole::parameter)
      ++count;
  return count;
}

struct Case {
  std::string policy;
  policy::ParallelConfig config;
};

std::string describe(const Case& c) {
  return fmt::format("{} dp {} tp {} micro-batches {} recompute {}", c.policy, c.config.dp, c.config.tp,
                     c.config.micro_batches, policy::name(c.config.recompute));
}

// Peak parameter bytes stay below the device's shard plus two layers' gathered weights, and above the
// shard (the gathered copies are counted at all).
TEST(Zero3Peak, ParametersStayBelowTheShardPlusTwoGatheredLayers) {
  const ir::Graph& graph = llama();
  using policy::Recompute;
  const std::vector<Case> cases = {
      {"zero", {.dp = 2, .zero = 3}},
      {"zero", {.dp = 2, .micro_batches = 2, .zero = 3}},
      {"zero", {.dp = 2, .zero = 3, .recompute = Recompute::full}},
      {"zero", {.dp = 2, .micro_batches = 2, .zero = 3, .recompute = Recompute::selective}},
      {"zero", {.dp = 4, .zero = 3, .recompute = Recompute::full}},
      {"megatron", {.dp = 2, .tp = 2, .micro_batches = 2, .zero = 3, .recompute = Recompute::full}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const auto p = exec::testing::policy_plan(graph, c.policy, c.config);
    ASSERT_FALSE(p->exec.programs.empty());
    const std::int64_t two_layers = 2 * layer_parameter_bytes(graph) / c.config.tp;
    const MemoryReport report = memory_usage(p->exec);
    const std::vector<std::int64_t> peaks = peak_parameters(p->exec);
    for (const DeviceMemory& d : report.devices) {
      const std::int64_t shard = d.model_state.parameter_bytes;
      const std::int64_t peak = peaks[static_cast<std::size_t>(d.device)];
      EXPECT_GT(peak, shard) << "device " << d.device;
      EXPECT_LE(peak, shard + two_layers) << "device " << d.device << ": shard " << shard << ", two layers "
                                          << two_layers;
    }
    std::printf("%s: peak parameters %lld bytes on device 0 = shard %lld + %.2f gathered layers\n", describe(c).c_str(),
                static_cast<long long>(peaks[0]), static_cast<long long>(report.devices[0].model_state.parameter_bytes),
                static_cast<double>(peaks[0] - report.devices[0].model_state.parameter_bytes) /
                    static_cast<double>(two_layers / 2));
  }
}

// Each micro-batch gathers the weights for its own forward and backward, and a fully recomputed layer
// gathers its weights once more for the recomputation.
TEST(Zero3Peak, GathersOncePerUse) {
  const ir::Graph& graph = llama();
  const auto one = exec::testing::policy_plan(graph, "zero", {.dp = 2, .zero = 3});
  const auto two = exec::testing::policy_plan(graph, "zero", {.dp = 2, .micro_batches = 2, .zero = 3});
  const auto rerun =
      exec::testing::policy_plan(graph, "zero", {.dp = 2, .zero = 3, .recompute = policy::Recompute::full});
  const int gathers = parameter_gathers(one->exec);
  EXPECT_GT(gathers, 0);
  EXPECT_EQ(parameter_gathers(two->exec), 2 * gathers);
  EXPECT_GT(parameter_gathers(rerun->exec), gathers);
  EXPECT_LT(parameter_gathers(rerun->exec), 2 * gathers);  // the backward alone reads weight gradients' inputs
}

// The gathers started ahead of their readers hold their copies longer: the peak parameter bytes grow with
// the prefetch depth (and memory_usage's peak with them), and one start ahead still stays below the shard
// plus two gathered layers.
TEST(Zero3Peak, PrefetchedGathersHoldTheirCopiesFromTheirStart) {
  const ir::Graph& graph = llama();
  const policy::ParallelConfig config{.dp = 2, .micro_batches = 2, .zero = 3};
  const std::int64_t two_layers = 2 * layer_parameter_bytes(graph);
  std::vector<std::int64_t> peaks, totals;
  for (int depth : {0, 1, 2, 4}) {
    SCOPED_TRACE(depth);
    const auto p = exec::testing::policy_plan(graph, "zero", config);
    const exec::ExecPassStats stats = exec::run_exec_passes(p->exec, {.prefetch_depth = depth});
    EXPECT_EQ(stats.prefetches > 0, depth > 0);
    const MemoryReport report = memory_usage(p->exec);
    peaks.push_back(peak_parameters(p->exec)[0]);
    totals.push_back(report.devices[0].peak_bytes);
    if (depth == 1) {
      EXPECT_LE(peaks.back(), report.devices[0].model_state.parameter_bytes + two_layers);
    }
  }
  for (std::size_t k = 1; k < peaks.size(); ++k) {
    EXPECT_GT(peaks[k], peaks[k - 1]) << "depth index " << k;
    EXPECT_GE(totals[k], totals[k - 1]) << "depth index " << k;
  }
  EXPECT_GT(totals.back(), totals.front());
}

}  // namespace
}  // namespace loom::cost
