// Activation memory of the pipeline schedules and of sequence parallelism, by the memory model over
// materialized plans of the shrunk GPT-3: 1F1B peak activation memory is ~p/m of GPipe's (the first
// stage keeps p micro-batches' activations where GPipe keeps all m; Narayanan et al. 2021, §2.2), and
// sequence parallelism stores the norms', dropouts' and residual adds' activations split over the tp
// ranks where tensor parallelism alone replicates them (Korthikanti et al. 2022, §4.2).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <type_traits>
#include <variant>

#include "testing/policy_plans.h"
#include "loom/cost/memory_model.h"

namespace loom::cost {
namespace {

using ir::TensorRole;

// The shrunk GPT-3 125M (bf16, AdamW) with `batch` samples and `layers` layers (0: the shrunk 2).
const ir::Graph& gpt(int batch, int layers = 0) {
  static std::map<std::pair<int, int>, std::unique_ptr<ir::Graph>> cache;
  auto& slot = cache[{batch, layers}];
  if (!slot) {
    auto forward = models::build_model("gpt3-125m", {.batch = batch, .layers = layers, .shrink = true});
    EXPECT_TRUE(forward) << forward.error().to_string();
    auto training = forward ? ir::build_training_graph(*forward, ops::builtin_ops(), {}) : Expected<ir::Graph>(ir::Graph{});
    EXPECT_TRUE(training) << training.error().to_string();
    slot = std::make_unique<ir::Graph>(training.value_or(ir::Graph{}));
  }
  return *slot;
}

// Per device: the largest number of activation bytes held at once, by memory_usage's accounting
// restricted to activations (a buffer counts from the instruction that writes it to its Free). The
// whole-memory peak of a shrunk model is set by its optimizer states, not by its activations.
std::vector<std::int64_t> peak_activations(const exec::ExecPlan& exec) {
  const ir::Graph& graph = *exec.plan->graph;
  std::vector<std::int64_t> peaks;
  for (const auto& program : exec.programs) {
    std::int64_t held = 0, peak = 0;
    const auto change = [&](exec::BufferId id, int sign) {
      const exec::Buffer& b = exec.buffer(id);
      if (graph.tensor(b.piece.tensor).role == TensorRole::activation) held += sign * b.bytes;
    };
    for (const exec::Instruction& instruction : program) {
      std::visit(
          [&](const auto& i) {
            using T = std::decay_t<decltype(i)>;
            if constexpr (std::is_same_v<T, exec::Compute>) {
              for (exec::BufferId out : i.outputs) change(out, 1);
            } else if constexpr (std::is_same_v<T, exec::Load> || std::is_same_v<T, exec::Collective> ||
                                 std::is_same_v<T, exec::Local>) {
              change(i.output, 1);
            } else if constexpr (std::is_same_v<T, exec::Recv>) {
              change(i.buffer, 1);
            } else if constexpr (std::is_same_v<T, exec::Free>) {
              change(i.buffer, -1);
            }
          },
          instruction);
      peak = std::max(peak, held);
    }
    peaks.push_back(peak);
  }
  return peaks;
}

// p = 2 stages, m = 16 micro-batches of one sample each. GPipe's first stage holds all 16 micro-batches'
// activations at its peak, 1F1B's at most p = 2 (a few more bytes: the micro-batch in flight between its
// forward and the backward that frees it), so the ratio is about p / m = 1/8.
TEST(PipelineMemory, OneFOneBPeakActivationsAreAboutPOverMOfGPipes) {
  constexpr int p = 2, m = 16;
  const ir::Graph& graph = gpt(m);
  const auto gpipe = exec::testing::policy_plan(graph, "pp", {.pp = p, .micro_batches = m,
                                                              .schedule = plan::ScheduleKind::gpipe});
  const auto one_f_one_b = exec::testing::policy_plan(graph, "pp", {.pp = p, .micro_batches = m,
                                                                    .schedule = plan::ScheduleKind::one_f_one_b});
  const std::vector<std::int64_t> g = peak_activations(gpipe->exec);
  const std::vector<std::int64_t> f = peak_activations(one_f_one_b->exec);
  ASSERT_EQ(g.size(), 2u);
  ASSERT_EQ(f.size(), 2u);
  const double ratio = static_cast<double>(f[0]) / static_cast<double>(g[0]);
  RecordProperty("first_stage_ratio", std::to_string(ratio));
  EXPECT_NEAR(ratio, static_cast<double>(p) / m, 0.25 * p / m) << f[0] << " / " << g[0] << " bytes";
  // The last stage starts each backward right after its forward: one micro-batch in flight.
  EXPECT_LT(f[1], g[1] / 4) << f[1] << " / " << g[1] << " bytes";
}

// Interleaving keeps more micro-batches in flight than 1F1B (its warm-up is (v - 1) p + 2 (p - 1) chunk
// forwards on the first device) but still far fewer than GPipe.
TEST(PipelineMemory, InterleavedPeakActivationsLieBetweenOneFOneBAndGPipe) {
  constexpr int p = 2, m = 16;
  const ir::Graph& graph = gpt(m, 4);
  const auto gpipe = exec::testing::policy_plan(graph, "pp", {.pp = p, .micro_batches = m,
                                                              .schedule = plan::ScheduleKind::gpipe});
  const auto one_f_one_b = exec::testing::policy_plan(graph, "pp", {.pp = p, .micro_batches = m});
  const auto interleaved =
      exec::testing::policy_plan(graph, "pp", {.pp = p, .micro_batches = m, .virtual_stages = 2});
  const std::vector<std::int64_t> g = peak_activations(gpipe->exec);
  const std::vector<std::int64_t> f = peak_activations(one_f_one_b->exec);
  const std::vector<std::int64_t> i = peak_activations(interleaved->exec);
  ASSERT_EQ(i.size(), 2u);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_GT(i[0], f[0]) << i[0] << " / " << f[0];
  RecordProperty("first_device_ratio", std::to_string(static_cast<double>(i[0]) / static_cast<double>(g[0])));
  EXPECT_LT(i[0], g[0] / 2) << i[0] << " / " << g[0];
}

// Tensor parallelism 2 with and without sequence parallelism: every device stores less activation
// memory with it (the replicated norm, dropout and residual activations are halved).
TEST(SequenceParallelMemory, LowerActivationMemoryPerDevice) {
  const ir::Graph& graph = gpt(4);
  const auto plain = exec::testing::policy_plan(graph, "tp", {.tp = 2});
  const auto sp = exec::testing::policy_plan(graph, "tp", {.tp = 2, .sequence_parallel = true});
  const std::vector<std::int64_t> without = peak_activations(plain->exec);
  const std::vector<std::int64_t> with = peak_activations(sp->exec);
  ASSERT_EQ(without.size(), 2u);
  ASSERT_EQ(with.size(), 2u);
  for (std::size_t d = 0; d < 2; ++d) {
    SCOPED_TRACE(d);
    RecordProperty("activation_ratio_" + std::to_string(d),
                   std::to_string(static_cast<double>(with[d]) / static_cast<double>(without[d])));
    EXPECT_LT(with[d], without[d]);
  }
  // And the whole peak (model state included) does not grow.
  const MemoryReport a = memory_usage(plain->exec);
  const MemoryReport b = memory_usage(sp->exec);
  for (std::size_t d = 0; d < 2; ++d) EXPECT_LE(b.devices[d].peak_bytes, a.devices[d].peak_bytes) << d;
}

}  // namespace
}  // namespace loom::cost
