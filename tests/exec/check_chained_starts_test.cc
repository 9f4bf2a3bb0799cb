// check_exec_plan on chained starts (exec_plan.h): a start reading another start's output before that
// start's wait passes; freeing that output before its own wait does not; and a chained start cannot run
// before the start it reads completes, which the progress pass follows (a deadlock the start order alone
// does not show).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "exec_test_plans.h"
#include "loom/exec/check.h"

namespace loom::exec {
namespace {

using testing::Fixture;
using testing::kFc;
using testing::kLoss;

std::string failure(const ExecPlan& exec) {
  const Expected<void> result = check_exec_plan(exec);
  if (result) return "(passed)";
  EXPECT_FALSE(result.error().hint.empty()) << result.error().message;
  return result.error().message;
}

// Three devices, each computing its loss part. Device 0 starts #0 over {0, 1} of its part and, chained on
// #0's sum, #1 over {0, 2}, then waits for #1 and #0; device 1 starts and waits #0, device 2 #1 (of its
// own part). With `transfer`, device 2 sends x to device 1 after its wait, which device 1 receives before
// its start: device 1's start needs device 2's wait, which needs #1 on device 0, which reads #0's sum,
// which needs device 1's start. With `free_early`, device 0 frees #0's sum right after #1 reads it.
std::unique_ptr<Fixture> chained(bool transfer, bool free_early) {
  auto f = std::make_unique<Fixture>();
  testing::split_plan(*f, 3, [](std::size_t, int k) { return k; });
  f->exec.num_devices = 3;
  f->exec.programs.resize(3);
  for (int tag = 0; tag < 2; ++tag) f->exec.collectives.push_back({ir::TensorId(3), "V->R all-reduce"});
  const auto sum = [&](int d) { return f->buffer(d, plan::SubTensor::whole(ir::TensorId(3), ir::Shape{})); };
  std::vector<BufferId> xs, loss;
  for (int d = 0; d < 3; ++d) {
    xs.push_back(f->load(d, f->part(kFc, d).inputs[0]));
    const BufferId w = f->load(d, f->part(kFc, d).inputs[1]);
    loss.push_back(f->compute(d, kLoss, d, {f->compute(d, kFc, d, {xs.back(), w})}));
  }
  const BufferId a0 = sum(0), b0 = sum(0);
  f->emit(0, CollectiveStart{comm::Primitive::all_reduce, {0, 1}, 0, {loss[0]}, {a0}});
  f->emit(0, CollectiveStart{comm::Primitive::all_reduce, {0, 2}, 1, {a0}, {b0}});
  if (free_early) f->emit(0, Free{a0});
  f->emit(0, CollectiveWait{1});
  f->emit(0, CollectiveWait{0});
  if (transfer) f->emit(1, Recv{2, 9, f->buffer(1, f->exec.buffer(xs[2]).piece)});
  f->emit(1, CollectiveStart{comm::Primitive::all_reduce, {0, 1}, 0, {loss[1]}, {sum(1)}});
  f->emit(1, CollectiveWait{0});
  f->emit(2, CollectiveStart{comm::Primitive::all_reduce, {0, 2}, 1, {loss[2]}, {sum(2)}});
  f->emit(2, CollectiveWait{1});
  if (transfer) f->emit(2, Send{1, 9, xs[2]});
  return f;
}

TEST(CheckChainedStarts, AStartMayReadAnotherStartsOutputBeforeItsWait) {
  auto f = chained(false, false);
  EXPECT_EQ(failure(f->exec), "(passed)");
}

TEST(CheckChainedStarts, ItsInputIsFreedOnlyAfterItsOwnStartsWait) {
  auto f = chained(false, true);
  EXPECT_THAT(failure(f->exec), ::testing::HasSubstr("device 0, instruction 6 (free b12): frees b12 %loss[], which the start at instruction 4 writes, before its wait"));
}

// The start order is acyclic (device 0 starts #0 then #1, the others one each), so only the chain shows it.
TEST(CheckChainedStarts, AChainedStartWaitsForTheStartItReads) {
  auto f = chained(true, false);
  EXPECT_EQ(failure(f->exec),
            "deadlock: device 1 waits at instruction 4 for a send from device 2 (tag 9), which waits at instruction 5 "
            "for device 1 to start #0; device 0 waits at instruction 6 for device 1 to start #0, which never arrives");
}

}  // namespace
}  // namespace loom::exec
