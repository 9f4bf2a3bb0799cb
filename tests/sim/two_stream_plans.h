// Hand-built plans for the simulator's streams (tests/exec/exec_test_plans.h): a parameter's start beside an
// activation's sum on each device.
#pragma once

#include <memory>
#include <vector>

#include "../exec/exec_test_plans.h"

namespace loom::sim::testing {

// Two devices. Device k: the gather of w started at once (a parameter: the parameters' start stream),
// ones [0, c], the all-reduce of ones at c, started (an activation: the activations' start stream) and
// waited for, or blocking (the communication stream; the compute stream holds until it ends), ones
// again, the gather's wait, fc, loss.
inline std::unique_ptr<exec::testing::Fixture> gather_beside_sum(bool blocking_sum = false) {
  using exec::testing::kFc;
  using exec::testing::kLoss;
  using exec::testing::kOnes;
  auto f = std::make_unique<exec::testing::Fixture>();
  exec::testing::split_plan(*f, 2, [](std::size_t, int k) { return k; });
  f->exec.num_devices = 2;
  f->exec.collectives.push_back({ir::TensorId(1), "D->R all-gather"});
  f->exec.collectives.push_back({ir::TensorId(4), "V->R all-reduce"});
  f->exec.programs.resize(2);
  const std::vector<int> group{0, 1};
  for (int k = 0; k < 2; ++k) {
    const exec::BufferId x = f->load(k, f->part(kFc, k).inputs[0]);
    plan::SubTensor rows = f->part(kFc, k).inputs[1];
    rows.box[0] = {4 * k, 4 * (k + 1), 1};
    const exec::BufferId shard = f->load(k, rows);
    const exec::BufferId w = f->buffer(k, f->part(kFc, k).inputs[1]);
    f->emit(k, exec::CollectiveStart{comm::Primitive::all_gather, group, 0, {shard}, {w}});
    const exec::BufferId ones = f->compute(k, kOnes, k, {exec::kNoBuffer});
    const exec::BufferId sum = f->buffer(k, f->part(kOnes, k).outputs[0]);
    if (blocking_sum) {
      f->emit(k, exec::Collective{comm::Primitive::all_reduce, group, 1, ones, sum});
    } else {
      f->emit(k, exec::CollectiveStart{comm::Primitive::all_reduce, group, 1, {ones}, {sum}});
      f->emit(k, exec::CollectiveWait{1});
    }
    f->compute(k, kOnes, k, {exec::kNoBuffer});
    f->emit(k, exec::CollectiveWait{0});
    const exec::BufferId fc = f->compute(k, kFc, k, {x, w});
    f->emit(k, exec::Free{x});
    f->emit(k, exec::Free{w});
    f->compute(k, kLoss, k, {fc});
  }
  return f;
}

}  // namespace loom::sim::testing
