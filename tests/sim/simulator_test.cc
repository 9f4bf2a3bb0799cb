// The simulator on hand-built ExecPlans (tests/exec/exec_test_plans.h), where every time is analytic.
#include "loom/sim/simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../exec/exec_test_plans.h"

namespace loom::sim {
namespace {

using exec::testing::data_parallel;
using exec::testing::pipeline;

constexpr double kMs = 1e-3;

Durations fixed(double compute, double collective, double p2p = 0) {
  return {.compute = [=](const plan::SubOp&, int) { return compute; },
          .collective = [=](const exec::Collective&, std::int64_t) { return collective; },
          .p2p = [=](int, int, std::int64_t) { return p2p; }};
}

// Device k of data_parallel(2): fc [0,1], loss [1,2], ones [2,3] on the compute stream; the compute
// stream issues the loss all-reduce after ones, at 3, and holds until it ends (blocking, exec_plan.h):
// [3,8] is all exposed, and nothing is idle.
TEST(Simulate, DataParallelStepIsAnalytic) {
  auto f = data_parallel(2);
  auto result = simulate(f->exec, fixed(1 * kMs, 5 * kMs));
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_NEAR(result->step_time, 8 * kMs, 1e-12);
  ASSERT_EQ(result->devices.size(), 2u);
  for (const DeviceTime& t : result->devices) {
    EXPECT_NEAR(t.compute, 3 * kMs, 1e-12);
    EXPECT_NEAR(t.communication, 5 * kMs, 1e-12);
    EXPECT_NEAR(t.exposed_communication, 5 * kMs, 1e-12);
    EXPECT_NEAR(t.idle, 0, 1e-12);
  }
  // 3 computes and one collective member per device, ordered by device, stream, start.
  ASSERT_EQ(result->events.size(), 8u);
  EXPECT_EQ(result->events[0].name, f->part(exec::testing::kFc, 0).name);
  EXPECT_EQ(result->events[3].kind, EventKind::collective);
  EXPECT_EQ(result->events[3].stream, Stream::communication);
  EXPECT_EQ(result->events[3].instruction, 6);
  EXPECT_NEAR(result->events[3].start, 3 * kMs, 1e-12);
  EXPECT_EQ(result->events[3].name, result->events[7].name);
}

// The same reduction started as soon as the loss parts are ready (data_parallel(2, async)): the start
// runs [2,7] under ones [2,3], and the compute stream waits for it at the end: step 7, 4 of the 5 exposed.
TEST(Simulate, StartOverlapsTheComputeUntilItsWait) {
  auto f = data_parallel(2, /*async=*/true);
  auto result = simulate(f->exec, fixed(1 * kMs, 5 * kMs));
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_NEAR(result->step_time, 7 * kMs, 1e-12);
  for (const DeviceTime& t : result->devices) {
    EXPECT_NEAR(t.compute, 3 * kMs, 1e-12);
    EXPECT_NEAR(t.communication, 5 * kMs, 1e-12);
    EXPECT_NEAR(t.exposed_communication, 4 * kMs, 1e-12);
    EXPECT_NEAR(t.idle, 0, 1e-12);
  }
  const auto start = std::ranges::find(result->events, EventKind::collective, &Event::kind);
  ASSERT_NE(start, result->events.end());
  EXPECT_EQ(start->instruction, 5);
  EXPECT_NEAR(start->start, 2 * kMs, 1e-12);
  EXPECT_THAT(start->name, ::testing::HasSubstr("all-reduce start #0"));
}

// A start whose sums nobody waits for before the end, no longer than the compute after it, is hidden; a
// blocking collective after that compute is not.
TEST(Simulate, StartHiddenBehindCompute) {
  auto f = data_parallel(2, /*async=*/true);
  auto result = simulate(f->exec, fixed(1 * kMs, 1 * kMs));
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_NEAR(result->step_time, 3 * kMs, 1e-12);
  for (const DeviceTime& t : result->devices) {
    EXPECT_NEAR(t.communication, 1 * kMs, 1e-12);
    EXPECT_NEAR(t.exposed_communication, 0, 1e-12);
    EXPECT_NEAR(t.idle, 0, 1e-12);
  }
  EXPECT_NEAR(result->idle_fraction(), 0, 1e-12);
  auto blocking = simulate(data_parallel(2)->exec, fixed(1 * kMs, 1 * kMs));
  ASSERT_TRUE(blocking) << blocking.error().to_string();
  EXPECT_NEAR(blocking->step_time, 4 * kMs, 1e-12);
}

// gathered(2): ones [0,1], the blocking all-gather of w's shards [1,6], fc [6,7], loss [7,8]. Started as
// soon as the shards are loaded (gathered(2, async), what prefetch_gathers makes of it) it runs [0,5]
// under ones, and fc waits for it: step 7. Both are priced alike: the all-gather of the same shard bytes
// into the same output, over the same group.
TEST(Simulate, GatherStartPricedAsTheBlockingGather) {
  struct Priced {
    comm::Primitive kind;
    std::vector<int> group;
    std::int64_t bytes, output_bytes;
    bool operator==(const Priced&) const = default;
  };
  std::vector<Priced> priced;
  const auto durations = [&](const exec::ExecPlan& exec) {
    Durations d = fixed(1 * kMs, 5 * kMs);
    d.collective = [&](const exec::Collective& c, std::int64_t bytes) {
      priced.push_back({c.kind, c.group, bytes, c.output.valid() ? exec.buffer(c.output).bytes : -1});
      return 5 * kMs;
    };
    return d;
  };
  auto blocking = exec::testing::gathered(2);
  auto result = simulate(blocking->exec, durations(blocking->exec));
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_NEAR(result->step_time, 8 * kMs, 1e-12);
  auto started = exec::testing::gathered(2, /*async=*/true);
  auto overlapped = simulate(started->exec, durations(started->exec));
  ASSERT_TRUE(overlapped) << overlapped.error().to_string();
  EXPECT_NEAR(overlapped->step_time, 7 * kMs, 1e-12);
  for (const DeviceTime& t : overlapped->devices) {
    EXPECT_NEAR(t.communication, 5 * kMs, 1e-12);
    EXPECT_NEAR(t.exposed_communication, 4 * kMs, 1e-12);
  }
  ASSERT_EQ(priced.size(), 2u);  // once a collective (one duration for all members)
  EXPECT_EQ(priced[0], priced[1]);
  EXPECT_EQ(priced[0], (Priced{comm::Primitive::all_gather, {0, 1}, 4 * 8 * 4, 8 * 8 * 4}));
}

// Two start streams: a parameter's start (a ZeRO gather or a gradient bucket, the data-parallel
// communicator's) does not hold back an activation's (a tensor-parallel sum). Device k: the gather of w
// started at once (10 ms, [0, 10]), ones [0, 1], the all-reduce of ones started at 1 (1 ms: [1, 2], not
// queued behind the gather until 11), its wait, ones again [2, 3], the gather's wait (10), fc [10, 11],
// loss [11, 12]: step 12 (14 with one start stream).
TEST(Simulate, ActivationStartDoesNotQueueBehindAParameterStart) {
  auto f = std::make_unique<exec::testing::Fixture>();
  exec::testing::split_plan(*f, 2, [](std::size_t, int k) { return k; });
  f->exec.num_devices = 2;
  f->exec.collectives.push_back({ir::TensorId(1), "D->R all-gather"});
  f->exec.collectives.push_back({ir::TensorId(4), "V->R all-reduce"});
  f->exec.programs.resize(2);
  const std::vector<int> group{0, 1};
  using exec::testing::kFc;
  using exec::testing::kLoss;
  using exec::testing::kOnes;
  for (int k = 0; k < 2; ++k) {
    const exec::BufferId x = f->load(k, f->part(kFc, k).inputs[0]);
    plan::SubTensor rows = f->part(kFc, k).inputs[1];
    rows.box[0] = {4 * k, 4 * (k + 1), 1};
    const exec::BufferId shard = f->load(k, rows);
    const exec::BufferId w = f->buffer(k, f->part(kFc, k).inputs[1]);
    f->emit(k, exec::CollectiveStart{comm::Primitive::all_gather, group, 0, {shard}, {w}});
    const exec::BufferId ones = f->compute(k, kOnes, k, {exec::kNoBuffer});
    const exec::BufferId sum = f->buffer(k, f->part(kOnes, k).outputs[0]);
    f->emit(k, exec::CollectiveStart{comm::Primitive::all_reduce, group, 1, {ones}, {sum}});
    f->emit(k, exec::CollectiveWait{1});
    f->compute(k, kOnes, k, {exec::kNoBuffer});
    f->emit(k, exec::CollectiveWait{0});
    const exec::BufferId fc = f->compute(k, kFc, k, {x, w});
    f->emit(k, exec::Free{x});
    f->emit(k, exec::Free{w});
    f->compute(k, kLoss, k, {fc});
  }
  Durations d = fixed(1 * kMs, 0);
  d.collective = [](const exec::Collective& c, std::int64_t) {
    return c.kind == comm::Primitive::all_gather ? 10 * kMs : 1 * kMs;
  };
  auto result = simulate(f->exec, d);
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_NEAR(result->step_time, 12 * kMs, 1e-12);
  int sums = 0;
  for (const Event& e : result->events)
    if (e.stream == Stream::communication && e.end - e.start < 2 * kMs) {
      ++sums;
      EXPECT_NEAR(e.start, 1 * kMs, 1e-12);
    }
  EXPECT_GT(sums, 0);
}

// A late member delays the collective for all: device 1's computes take twice as long, so the started
// all-reduce runs at 4 (its loss) and device 0 waits for it idle; blocking, it runs after device 1's
// ones, at 6.
TEST(Simulate, CollectiveWaitsForItsLastMember) {
  Durations d = fixed(0, 1 * kMs);
  d.compute = [](const plan::SubOp&, int device) { return (device + 1) * kMs; };
  auto f = data_parallel(2, /*async=*/true);
  auto result = simulate(f->exec, d);
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_NEAR(result->step_time, 6 * kMs, 1e-12);  // device 1: computes [0,6], all-reduce [4,5]
  const DeviceTime& t0 = result->devices[0];
  EXPECT_NEAR(t0.compute, 3 * kMs, 1e-12);
  EXPECT_NEAR(t0.exposed_communication, 1 * kMs, 1e-12);
  EXPECT_NEAR(t0.idle, 2 * kMs, 1e-12);
  EXPECT_NEAR(result->devices[1].exposed_communication, 0, 1e-12);
  auto blocking = simulate(data_parallel(2)->exec, d);
  ASSERT_TRUE(blocking) << blocking.error().to_string();
  EXPECT_NEAR(blocking->step_time, 7 * kMs, 1e-12);  // all-reduce [6,7]
  EXPECT_NEAR(blocking->devices[0].idle, 3 * kMs, 1e-12);
}

// pipeline(1): device 0 computes fc [0,1] and sends it (p2p 0.5); device 1 receives [1,1.5], computes
// loss [1.5,2.5] and ones [2.5,3.5], and then all-reduces the loss alone [3.5,5.5].
TEST(Simulate, SendAndRecv) {
  auto f = pipeline(1);
  auto result = simulate(f->exec, fixed(1 * kMs, 2 * kMs, 0.5 * kMs));
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_NEAR(result->step_time, 5.5 * kMs, 1e-12);
  const DeviceTime& t0 = result->devices[0];
  EXPECT_NEAR(t0.compute, 1 * kMs, 1e-12);
  EXPECT_NEAR(t0.communication, 0.5 * kMs, 1e-12);  // the send holds its stream
  EXPECT_NEAR(t0.exposed_communication, 0.5 * kMs, 1e-12);
  EXPECT_NEAR(t0.idle, 4 * kMs, 1e-12);
  const DeviceTime& t1 = result->devices[1];
  EXPECT_NEAR(t1.compute, 2 * kMs, 1e-12);
  EXPECT_NEAR(t1.communication, 2.5 * kMs, 1e-12);
  EXPECT_NEAR(t1.exposed_communication, 2.5 * kMs, 1e-12);  // the recv and the all-reduce
  EXPECT_NEAR(t1.idle, 1 * kMs, 1e-12);
}

// A recv issued after its send has arrived completes one p2p time after the recv is issued.
TEST(Simulate, RecvCompletesAfterTheLaterIssue) {
  auto f = pipeline(1);
  // Device 1 posts its recv at 0; device 0 sends at 3 (its fc takes 3).
  Durations d = fixed(0, 0, 1 * kMs);
  d.compute = [](const plan::SubOp&, int device) { return device == 0 ? 3 * kMs : 0.0; };
  auto result = simulate(f->exec, d);
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_NEAR(result->step_time, 4 * kMs, 1e-12);
  const auto recv = std::ranges::find(result->events, EventKind::recv, &Event::kind);
  ASSERT_NE(recv, result->events.end());
  EXPECT_NEAR(recv->start, 3 * kMs, 1e-12);
  EXPECT_NEAR(recv->end, 4 * kMs, 1e-12);
}

// Contention 2: the started all-reduce of data_parallel(2, async) runs from 2 under ones [2, 3] and
// progresses at half speed there: 0.5 ms of its 1 ms done at 3, the rest alone by 3.5. Exposed: the 0.5
// past ones.
TEST(Simulate, ContentionSlowsCommunicationUnderCompute) {
  auto f = data_parallel(2, /*async=*/true);
  Durations d = fixed(1 * kMs, 1 * kMs);
  d.contention = 2;
  auto result = simulate(f->exec, d);
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_NEAR(result->step_time, 3.5 * kMs, 1e-12);
  for (const DeviceTime& t : result->devices) {
    EXPECT_NEAR(t.communication, 1.5 * kMs, 1e-12);
    EXPECT_NEAR(t.exposed_communication, 0.5 * kMs, 1e-12);
  }
  // A collective ends with its slowest member: device 1's ones runs [2, 5], so its share progresses at
  // half speed throughout and ends at 4; device 0's would end at 3.5. Both end at 4.
  Durations slow = d;
  slow.compute = [](const plan::SubOp& s, int device) {
    return device == 1 && s.name.starts_with("ones") ? 3 * kMs : 1 * kMs;
  };
  auto uneven = simulate(f->exec, slow);
  ASSERT_TRUE(uneven) << uneven.error().to_string();
  for (const Event& e : uneven->events)
    if (e.kind == EventKind::collective) {
      EXPECT_NEAR(e.start, 2 * kMs, 1e-12);
      EXPECT_NEAR(e.end, 4 * kMs, 1e-12);
    }
  d.contention = 0.5;
  auto bad = simulate(f->exec, d);
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, ::testing::HasSubstr("a contention of 0.5"));
}

TEST(Simulate, DeadlockNamesTheDevices) {
  auto f = data_parallel(2);
  // Each device receives from the other before sending: neither send is ever issued.
  for (auto& program : f->exec.programs) program.clear();
  for (int d = 0; d < 2; ++d) {
    const exec::BufferId out = f->load(d, f->part(exec::testing::kFc, d).inputs[0]);
    const exec::BufferId in = f->buffer(d, f->part(exec::testing::kFc, 1 - d).inputs[0]);
    f->emit(d, exec::Recv{1 - d, 1 - d, in});
    f->emit(d, exec::Send{1 - d, d, out});
  }
  auto result = simulate(f->exec, fixed(1, 1, 1));
  ASSERT_FALSE(result);
  EXPECT_THAT(result.error().message, ::testing::HasSubstr("deadlock"));
  EXPECT_THAT(result.error().message, ::testing::HasSubstr("device 0 (communication stream) at instruction 1"));
  EXPECT_THAT(result.error().message, ::testing::HasSubstr("device 1 (communication stream) at instruction 1"));
}

TEST(Simulate, RejectsMissingHooksAndBadDurations) {
  auto f = data_parallel(2);
  Durations no_collective = fixed(1, 1);
  no_collective.collective = nullptr;
  auto missing = simulate(f->exec, no_collective);
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, ::testing::HasSubstr("Durations::collective"));
  auto negative = simulate(f->exec, fixed(-1, 1));
  ASSERT_FALSE(negative);
  EXPECT_THAT(negative.error().message, ::testing::HasSubstr("device 0's instruction 2"));
}

TEST(Simulate, EmptyPlan) {
  exec::ExecPlan empty;
  empty.num_devices = 2;
  empty.programs.resize(2);
  auto result = simulate(empty, fixed(1, 1));
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_EQ(result->step_time, 0);
  EXPECT_EQ(result->devices.size(), 2u);
  EXPECT_EQ(result->idle_fraction(), 0);
}

}  // namespace
}  // namespace loom::sim
