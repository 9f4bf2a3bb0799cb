// A hierarchical partial sum (a reduce-scatter inside each pair, an all-reduce across the pairs, an
// all-gather inside: the layout search's chain for tp over two nodes) started whole by overlap_collectives
// and priced by the simulator on uniform synthetic costs: every link a chained start on the start stream,
// beginning when the one it reads ends, the three hidden behind the compute before the sum's reader.
#include <gtest/gtest.h>

#include <random>

#include "../exec/exec_test_plans.h"
#include "loom/exec/passes.h"
#include "loom/sim/simulator.h"

namespace loom::sim {
namespace {

using exec::testing::Fixture;
using exec::testing::kFc;
using exec::testing::kLoss;
using exec::testing::kOnes;

constexpr double kMs = 1e-3;

// Four devices, pairs {0, 1} and {2, 3}. Device d: load x, w; fc (its partial sum P); the blocking chain
// reduce-scatter #pair (P -> R) over its pair, all-reduce #2 + d % 2 (R -> S) across the pairs,
// all-gather #4 + pair (S -> O) over its pair; `between` computes that read none of it (ones); loss
// reading O. The buffers' boxes are the fc part's throughout: the simulator prices by the uniform costs
// below, not by bytes.
std::unique_ptr<Fixture> chain(int between) {
  auto f = std::make_unique<Fixture>();
  exec::testing::split_plan(*f, 4, [](std::size_t, int k) { return k; });
  f->exec.num_devices = 4;
  f->exec.programs.resize(4);
  for (const char* rule : {"V->R reduce-scatter", "V->R reduce-scatter", "V->R all-reduce", "V->R all-reduce",
                           "V->R all-gather", "V->R all-gather"})
    f->exec.collectives.push_back({ir::TensorId(2), rule});
  for (int d = 0; d < 4; ++d) {
    const int pair = d / 2;
    const std::vector<int> inside{2 * pair, 2 * pair + 1}, across{d % 2, d % 2 + 2};
    const exec::BufferId x = f->load(d, f->part(kFc, d).inputs[0]);
    const exec::BufferId w = f->load(d, f->part(kFc, d).inputs[1]);
    const exec::BufferId p = f->compute(d, kFc, d, {x, w});
    const plan::SubTensor& piece = f->part(kFc, d).outputs[0];
    const exec::BufferId r = f->buffer(d, piece), s = f->buffer(d, piece), o = f->buffer(d, piece);
    f->emit(d, exec::Collective{comm::Primitive::reduce_scatter, inside, pair, p, r});
    f->emit(d, exec::Free{p});
    f->emit(d, exec::Collective{comm::Primitive::all_reduce, across, 2 + d % 2, r, s});
    f->emit(d, exec::Free{r});
    f->emit(d, exec::Collective{comm::Primitive::all_gather, inside, 4 + pair, s, o});
    f->emit(d, exec::Free{s});
    for (int i = 0; i < between; ++i) f->compute(d, kOnes, d, {exec::kNoBuffer});
    f->compute(d, kLoss, d, {o});
    f->emit(d, exec::Free{o});
  }
  return f;
}

Durations uniform(double collective) {
  return {.compute = [](const plan::SubOp&, int) { return 1 * kMs; },
          .collective = [collective](const exec::Collective&, std::int64_t) { return collective; },
          .p2p = {},
          .local = {},
          .contention = 1};
}

// Blocking: fc, the three links in a row, the `between` computes, loss: 2 + 3c + between. Started: fc
// ends at 1, the links run [1, 1 + 3c] on the start stream (each begins at the end of the one it reads)
// beside the between computes [1, 1 + between], and loss waits for the later: 2 + max(3c, between).
TEST(OasesChain, AHierarchicalSumStartedWholeHidesBehindTheComputeBeforeItsReader) {
  std::mt19937 random(14);
  std::uniform_int_distribution<int> computes(1, 4);
  std::uniform_real_distribution<double> link(0.05 * kMs, 2 * kMs);
  for (int trial = 0; trial < 200; ++trial) {
    const int between = computes(random);
    const double c = link(random);
    SCOPED_TRACE(testing::Message() << "between " << between << ", link " << c);
    auto blocking = chain(between);
    const auto before = simulate(blocking->exec, uniform(c));
    ASSERT_TRUE(before) << before.error().to_string();
    EXPECT_NEAR(before->step_time, (2 + between) * kMs + 3 * c, 1e-12);

    auto started = chain(between);
    ASSERT_EQ(exec::overlap_collectives(started->exec), 2);  // the two all-reduces across, each a chain
    for (const auto& program : started->exec.programs) {
      int starts = 0, waits = 0;
      for (const exec::Instruction& in : program) {
        starts += std::holds_alternative<exec::CollectiveStart>(in);
        waits += std::holds_alternative<exec::CollectiveWait>(in);
        EXPECT_FALSE(std::holds_alternative<exec::Collective>(in));
      }
      EXPECT_EQ(starts, 3);
      EXPECT_EQ(waits, 3);
    }
    const auto after = simulate(started->exec, uniform(c));
    ASSERT_TRUE(after) << after.error().to_string();
    EXPECT_NEAR(after->step_time, 2 * kMs + std::max(3 * c, between * kMs), 1e-12);
    for (const DeviceTime& t : after->devices) {
      EXPECT_NEAR(t.communication, 3 * c, 1e-12);
      EXPECT_NEAR(t.exposed_communication, std::max(0.0, 3 * c - between * kMs), 1e-12);
    }
  }
}

// A chain is started by all the members of each of its collectives or by none: device 1 sends x to device 3
// between its writer and its chain, so neither may move its reduce-scatter across the transfer; their pair
// partners 0 and 2 share those reduce-scatters' tags, so their chain (the all-reduce across #2, whose own
// members both could start it) stays blocking too, rather than start a tag device 1 runs blocking.
TEST(OasesChain, AChainIsStartedByAllItsMembersOrByNone) {
  auto f = chain(2);
  auto& one = f->exec.programs[1];
  auto& three = f->exec.programs[3];
  const exec::BufferId x1 = std::get<exec::Load>(one[0]).output;
  one.insert(one.begin() + 3, exec::Send{3, 99, x1});
  three.insert(three.begin() + 3, exec::Recv{1, 99, f->buffer(3, f->exec.buffer(x1).piece)});
  EXPECT_EQ(exec::overlap_collectives(f->exec), 0);
  for (const auto& program : f->exec.programs)
    for (const exec::Instruction& in : program) EXPECT_FALSE(std::holds_alternative<exec::CollectiveStart>(in));
}

}  // namespace
}  // namespace loom::sim
