// Oases' overlap (exec/passes.h, overlap_collectives) priced by the simulator on uniform synthetic costs:
// two sub-batches per device, each segment's compute as long as the all-reduce after it, so the
// overlapped step hides every all-reduce behind the other sub-batch's segment. Exact numbers.
#include <gtest/gtest.h>

#include <algorithm>
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

// The tiny graph (exec_test_plans.h) split 4 ways along the batch, parts 2d and 2d + 1 on device d: its
// two sub-batches. Each device runs Algorithm 1's forward: sub-batch 0's segment (fc, loss), the
// all-reduce #0 of its loss part over both devices, sub-batch 1's segment and all-reduce #1, then
// sub-batch 0's next segment (ones) and the end of #0's sums, and sub-batch 1's. Blocking all-reduces,
// as materialization places them.
std::unique_ptr<Fixture> two_sub_batches() {
  auto f = std::make_unique<Fixture>();
  exec::testing::split_plan(*f, 4, [](std::size_t, int k) { return k / 2; });
  f->exec.num_devices = 2;
  f->exec.programs.resize(2);
  for (int tag = 0; tag < 2; ++tag) f->exec.collectives.push_back({ir::TensorId(3), "V->R all-reduce"});
  const std::vector<int> group{0, 1};
  std::vector<std::vector<exec::BufferId>> losses(2), sums(2);  // by sub-batch, by device
  for (int d = 0; d < 2; ++d) {
    const exec::BufferId w = f->load(d, f->part(kFc, 2 * d).inputs[1]);
    for (int j = 0; j < 2; ++j) {
      const exec::BufferId x = f->load(d, f->part(kFc, 2 * d + j).inputs[0]);
      const exec::BufferId fc = f->compute(d, kFc, 2 * d + j, {x, w});
      losses[static_cast<std::size_t>(j)].push_back(f->compute(d, kLoss, 2 * d + j, {fc}));
      f->emit(d, exec::Free{x});
      f->emit(d, exec::Free{fc});
      const exec::BufferId sum = f->buffer(d, plan::SubTensor::whole(ir::TensorId(3), ir::Shape{}));
      f->emit(d, exec::Collective{comm::Primitive::all_reduce, group, j, losses[static_cast<std::size_t>(j)].back(), sum});
      sums[static_cast<std::size_t>(j)].push_back(sum);
    }
    for (int j = 0; j < 2; ++j) {
      f->compute(d, kOnes, 2 * d + j, {exec::kNoBuffer});
      f->emit(d, exec::Free{sums[static_cast<std::size_t>(j)][static_cast<std::size_t>(d)]});
    }
  }
  return f;
}

Durations uniform(double contention = 1) {
  return {.compute = [](const plan::SubOp&, int) { return 1 * kMs; },
          .collective = [](const exec::Collective&, std::int64_t) { return 2 * kMs; },
          .p2p = {},
          .local = {},
          .contention = contention};
}

// Blocking: 6 computes and 2 all-reduces of 2 in a row, 10. Overlapped: #0 starts after loss[0] at 2 and
// runs [2, 4] beside sub-batch 1's fc and loss; #1 starts at 4 and runs [4, 6] beside the two ones:
// step 6, the 4 of communication all hidden. Under contention 2 (communication at half speed while its
// device computes): #0 has done 1.5 by 5, where the wait for it stops compute, and ends at 5.5; #1 runs
// from 5.5, at half speed under ones[1] until 6.5, and its wait ends at 8: step 8, 2 of 4 exposed.
TEST(OasesOverlap, SubBatchAllReducesHideBehindTheOtherSubBatch) {
  auto blocking = two_sub_batches();
  auto before = simulate(blocking->exec, uniform());
  ASSERT_TRUE(before) << before.error().to_string();
  EXPECT_NEAR(before->step_time, 10 * kMs, 1e-12);

  auto overlapped = two_sub_batches();
  EXPECT_EQ(exec::overlap_collectives(overlapped->exec), 2);
  for (const auto& program : overlapped->exec.programs) {
    int starts = 0, waits = 0;
    for (const exec::Instruction& in : program) {
      starts += std::holds_alternative<exec::CollectiveStart>(in);
      waits += std::holds_alternative<exec::CollectiveWait>(in);
      EXPECT_FALSE(std::holds_alternative<exec::Collective>(in));
    }
    EXPECT_EQ(starts, 2);
    EXPECT_EQ(waits, 2);
  }
  auto after = simulate(overlapped->exec, uniform());
  ASSERT_TRUE(after) << after.error().to_string();
  EXPECT_NEAR(after->step_time, 6 * kMs, 1e-12);
  for (const DeviceTime& t : after->devices) {
    EXPECT_NEAR(t.compute, 6 * kMs, 1e-12);
    EXPECT_NEAR(t.communication, 4 * kMs, 1e-12);
    EXPECT_NEAR(t.exposed_communication, 0, 1e-12);
  }

  auto contended = simulate(overlapped->exec, uniform(2));
  ASSERT_TRUE(contended) << contended.error().to_string();
  EXPECT_NEAR(contended->step_time, 8 * kMs, 1e-12);
  for (const DeviceTime& t : contended->devices) EXPECT_NEAR(t.exposed_communication, 2 * kMs, 1e-12);
  // Blocking collectives hold the compute stream: no compute beside them, no contention.
  auto blocking_contended = simulate(blocking->exec, uniform(2));
  ASSERT_TRUE(blocking_contended) << blocking_contended.error().to_string();
  EXPECT_NEAR(blocking_contended->step_time, 10 * kMs, 1e-12);
}

// Two nodes of Oases' cost model (papers/oases.md §V, Eq. 3): fc (compute d0, then its all-reduce c0) and
// loss (d1, then c1), each run as two sub-batches in Algorithm 1's order; loss reads fc's sums. Device d:
//   fc[0] #0(fc[0]) fc[1] #1(fc[1]) loss[0](#0) #2(loss[0]) loss[1](#1) #3(loss[1]) ones[0] ones[1], the
// loss sums freed at the end; blocking, as materialization places the all-reduces. The ones take no time:
// they only give #3 compute to start beside, so that every all-reduce is a start. (A blocking all-reduce
// left among the starts of its group would run on the simulator's other communication stream, beside
// them, where one communicator would run them in turn.)
std::unique_ptr<Fixture> two_nodes() {
  auto f = std::make_unique<Fixture>();
  exec::testing::split_plan(*f, 4, [](std::size_t, int k) { return k / 2; });
  f->exec.num_devices = 2;
  f->exec.programs.resize(2);
  for (int tag = 0; tag < 4; ++tag) f->exec.collectives.push_back({ir::TensorId(tag < 2 ? 2 : 3), "V->R all-reduce"});
  const std::vector<int> group{0, 1};
  const auto all_reduce = [&](int d, exec::BufferId in, std::int64_t tag) {
    const exec::BufferId sum = f->buffer(d, f->exec.buffer(in).piece);
    f->emit(d, exec::Collective{comm::Primitive::all_reduce, group, tag, in, sum});
    return sum;
  };
  for (int d = 0; d < 2; ++d) {
    const exec::BufferId w = f->load(d, f->part(kFc, 2 * d).inputs[1]);
    std::vector<exec::BufferId> fc_sums, loss_sums;
    for (int j = 0; j < 2; ++j) {
      const exec::BufferId x = f->load(d, f->part(kFc, 2 * d + j).inputs[0]);
      fc_sums.push_back(all_reduce(d, f->compute(d, kFc, 2 * d + j, {x, w}), j));
    }
    for (int j = 0; j < 2; ++j)
      loss_sums.push_back(all_reduce(d, f->compute(d, kLoss, 2 * d + j, {fc_sums[static_cast<std::size_t>(j)]}), 2 + j));
    for (int j = 0; j < 2; ++j) f->compute(d, kOnes, 2 * d + j, {exec::kNoBuffer});  // free of charge below
    for (exec::BufferId b : loss_sums) f->emit(d, exec::Free{b});
  }
  return f;
}

// Eq. 3 for k = 1: T = d0 + max(d1, c0) + max(d0, c0) + max(d1, c1) + c1 (the first node's sub-batch 0,
// then each compute beside the all-reduce it overlaps, then the last all-reduce). The simulator, given the
// overlapped program, gives exactly that for any costs: the wait of each segment and the in-order start
// stream are the max terms. 200 random cases.
TEST(OasesOverlap, OverlappedStepIsOasesCostModel) {
  std::mt19937 random(14);
  std::uniform_real_distribution<double> cost(0.1, 3.0);
  auto f = two_nodes();
  ASSERT_EQ(exec::overlap_collectives(f->exec), 4);
  for (int trial = 0; trial < 200; ++trial) {
    const double d0 = cost(random) * kMs, d1 = cost(random) * kMs, c0 = cost(random) * kMs, c1 = cost(random) * kMs;
    Durations durations{.compute = [&](const plan::SubOp& s, int) {
                          return s.op == f->part(kFc, 0).op ? d0 : s.op == f->part(kLoss, 0).op ? d1 : 0.0;
                        },
                        .collective = [&](const exec::Collective& c, std::int64_t) { return c.tag < 2 ? c0 : c1; },
                        .p2p = {},
                        .local = {},
                        .contention = 1};
    auto result = simulate(f->exec, durations);
    ASSERT_TRUE(result) << result.error().to_string();
    const double expected = d0 + std::max(d1, c0) + std::max(d0, c0) + std::max(d1, c1) + c1;
    EXPECT_NEAR(result->step_time, expected, 1e-12) << "d0 " << d0 << " d1 " << d1 << " c0 " << c0 << " c1 " << c1;
  }
}

}  // namespace
}  // namespace loom::sim
