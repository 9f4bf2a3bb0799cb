// The interlaced evaluator (plan/interlaced_schedule.h, evaluate_interlaced): exact times on hand-checked
// orders, a shared block as a barrier of every device, and the orders it refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loom/plan/interlaced_schedule.h"

namespace loom::plan {
namespace {

using Sequences = std::vector<std::vector<InterlacedBlock>>;

InterlacedBlock F(int s, int m) { return {.block = {s, m, BlockPart::forward}}; }
InterlacedBlock B(int s, int m) { return {.block = {s, m, BlockPart::backward}}; }
InterlacedBlock E(int m) { return {.shared = SharedPart::embed_forward, .block = {.micro_batch = m}}; }
InterlacedBlock H(int m) { return {.shared = SharedPart::head, .block = {.micro_batch = m}}; }
InterlacedBlock G(int m) { return {.shared = SharedPart::embed_backward, .block = {.micro_batch = m}}; }

const InterlacedCosts kCosts{.forward = {1, 2}, .backward = {3, 4}, .embed_forward = 0.5, .head = 1,
                             .embed_backward = 0.25};

TEST(EvaluateInterlaced, SharedBlocksWaitForEveryDevice) {
  // Two stages, one micro-batch, stage 0 reads the lookups. E0 on both at [0, 0.5]; F0.0 [0.5, 1.5];
  // F1.0 [1.5, 3.5]; H0 waits for device 1 (and its input F1.0): [3.5, 4.5] on both, device 0 idle 2;
  // B1.0 [4.5, 8.5]; B0.0 [8.5, 11.5]; G0 waits for device 0: [11.5, 11.75], device 1 idle 3.
  const Sequences order{{E(0), F(0, 0), H(0), B(0, 0), G(0)}, {E(0), F(1, 0), H(0), B(1, 0), G(0)}};
  const auto e = evaluate_interlaced(order, 1, std::vector<int>{0}, kCosts);
  ASSERT_TRUE(e) << e.error().to_string();
  EXPECT_DOUBLE_EQ(e->makespan, 11.75);
  // Device 0 works 0.5 + 1 + 1 + 3 + 0.25, device 1 0.5 + 2 + 1 + 4 + 0.25.
  EXPECT_DOUBLE_EQ(e->idle[0], 11.75 - 5.75);
  EXPECT_DOUBLE_EQ(e->idle[1], 11.75 - 7.75);
  EXPECT_EQ(e->peak_held, (std::vector<int>{1, 1}));
}

TEST(EvaluateInterlaced, BarriersWaitForTheirInputsAndTheLastDeviceToArrive) {
  // Two micro-batches, stage 0 holding both before its first backward. E0 E1 [0, 1]; F0.0 [1, 2],
  // F0.1 [2, 3]; F1.0 [2, 4]; H0 [4, 5] (device 0 idle from 3); B1.0 [5, 9]; F1.1 [9, 11]; B0.0 [9, 12];
  // H1 waits for device 0: [12, 13]. With G0 right after H1 (its input B0.0 is done): G0 [13, 13.25],
  // B1.1 [13.25, 17.25], B0.1 [17.25, 20.25], G1 [20.25, 20.5]. With G0 deferred: B1.1 [13, 17],
  // B0.1 [17, 20], G0 G1 [20, 20.5]: the same end, the G's where device 1 waits anyway.
  const Sequences early{{E(0), E(1), F(0, 0), F(0, 1), H(0), B(0, 0), H(1), G(0), B(0, 1), G(1)},
                        {E(0), E(1), F(1, 0), H(0), B(1, 0), F(1, 1), H(1), G(0), B(1, 1), G(1)}};
  const auto e = evaluate_interlaced(early, 2, std::vector<int>{0}, kCosts);
  ASSERT_TRUE(e) << e.error().to_string();
  EXPECT_DOUBLE_EQ(e->makespan, 20.5);
  EXPECT_DOUBLE_EQ(e->idle[0], 20.5 - (1 + 2 + 6 + 2 + 0.5));
  EXPECT_DOUBLE_EQ(e->idle[1], 20.5 - (1 + 4 + 8 + 2 + 0.5));
  EXPECT_EQ(e->peak_held, (std::vector<int>{2, 1}));
  const Sequences late{{E(0), E(1), F(0, 0), F(0, 1), H(0), B(0, 0), H(1), B(0, 1), G(0), G(1)},
                       {E(0), E(1), F(1, 0), H(0), B(1, 0), F(1, 1), H(1), B(1, 1), G(0), G(1)}};
  const auto l = evaluate_interlaced(late, 2, std::vector<int>{0}, kCosts);
  ASSERT_TRUE(l) << l.error().to_string();
  EXPECT_DOUBLE_EQ(l->makespan, 20.5);
  // Stage 0 reading no lookups: F0.0 starts at 0, yet still behind the E barrier that every device runs.
  const auto unread = evaluate_interlaced(late, 2, std::vector<int>{}, kCosts);
  ASSERT_TRUE(unread) << unread.error().to_string();
  EXPECT_DOUBLE_EQ(unread->makespan, 20.5);
}

TEST(EvaluateInterlaced, Errors) {
  const auto error_of = [](const Sequences& order, int micro_batches, const InterlacedCosts& costs = kCosts) {
    const auto e = evaluate_interlaced(order, micro_batches, std::vector<int>{0}, costs);
    return e ? std::string() : e.error().to_string();
  };
  // H0 before F0.0 on device 0: the last stage's F waits for F0.0 behind the barrier.
  EXPECT_NE(error_of({{E(0), H(0), F(0, 0), B(0, 0), G(0)}, {E(0), F(1, 0), H(0), B(1, 0), G(0)}}, 1)
                .find("deadlocks (device 0 at H0, device 1 at F1.0)"),
            std::string::npos);
  EXPECT_NE(error_of({{E(0), F(0, 0), H(0), B(0, 0), G(0)}, {E(0), F(1, 0), B(1, 0), H(0), G(0)}}, 1)
                .find("deadlocks"),
            std::string::npos);
  EXPECT_NE(error_of({{E(0), F(0, 0), H(0), B(0, 0), G(0)}, {F(1, 0), E(0), G(0), H(0), B(1, 0)}}, 1)
                .find("device 1 runs other shared blocks, or in another order"),
            std::string::npos);
  EXPECT_NE(error_of({{E(0), F(0, 0), H(0), B(0, 0)}, {E(0), F(1, 0), H(0), B(1, 0)}}, 1).find("2 shared blocks for 1"),
            std::string::npos);
  EXPECT_NE(error_of({{E(0), F(0, 0), H(0), G(0)}, {E(0), F(1, 0), H(0), B(1, 0), G(0)}}, 1)
                .find("device 0 misses a stage block"),
            std::string::npos);
  EXPECT_NE(error_of({{E(0), F(1, 0), H(0), B(0, 0), G(0)}, {E(0), F(1, 0), H(0), B(1, 0), G(0)}}, 1)
                .find("does not belong on device 0"),
            std::string::npos);
  EXPECT_NE(error_of({{E(0), F(0, 0), H(0), B(0, 0), G(0)}, {E(0), F(1, 0), H(0), B(1, 0), G(0)}}, 1,
                     {.forward = {1}, .backward = {1}})
                .find("costs for 1 and 1 stages, the pipeline has 2"),
            std::string::npos);
  // A cost that is not a number would make every comparison false: refused, as the search refuses it.
  const std::vector<std::vector<InterlacedBlock>> order = {{E(0), F(0, 0), H(0), B(0, 0), G(0)},
                                                           {E(0), F(1, 0), H(0), B(1, 0), G(0)}};
  EXPECT_NE(error_of(order, 1, {.forward = {1, std::nan("")}, .backward = {1, 1}}).find("a block costs nan s"),
            std::string::npos);
  EXPECT_NE(error_of(order, 1, {.forward = {1, 1}, .backward = {1, 1}, .head = -1}).find("a block costs -1 s"),
            std::string::npos);
}

}  // namespace
}  // namespace loom::plan
