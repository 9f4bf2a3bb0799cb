// Hand-built ExecPlans for the exec tests, over a tiny forward graph:
//   x[12, 8] -> fc = linear(x, w[8, 8]) -> fc[12, 8] -> loss = mean(fc) (a scalar); ones = fill_like(fc)
// (fill_like reads fc for its shape alone, so its compute takes kNoBuffer). An op's output tensor has
// the op's name. Tensors: 0 x, 1 w, 2 fc, 3 loss, 4 ones.
//
// data_parallel(n): every op split n ways along the batch, part k on device k. Device k:
//   0 load x[k]   1 load w   2 compute fc[k]   3 free x[k]   4 compute loss[k] (value part k of n)
//   5 compute ones[k]   6 all-reduce #0 of the loss parts   7 free fc[k]
// data_parallel(n, /*async=*/true): the loss parts reduced by a start as soon as they are computed, waited
// for at the end. Device k:
//   0 load x[k]   1 load w   2 compute fc[k]   3 free x[k]   4 compute loss[k]   5 start #0 of the loss parts
//   6 compute ones[k]   7 wait #0   8 free fc[k]
// gathered(n): data_parallel's split with w sharded as ZeRO-3 does (device k holds rows [8k/n, 8(k+1)/n)),
// gathered whole before fc reads it. Device k:
//   0 load x[k]   1 load w's shard k   2 compute ones[k]   3 all-gather #0 of the shards into w
//   4 compute fc[k]   5 free x[k]   6 free w   7 compute loss[k]
// gathered(n, /*async=*/true): the gather started as soon as the shard is loaded and waited for right
// before fc, as prefetch_gathers places it. Device k:
//   0 load x[k]   1 load w's shard k   2 start #0 (all-gather)   3 compute ones[k]   4 wait #0
//   5 compute fc[k]   6 free x[k]   7 free w   8 compute loss[k]
// pipeline(r): the same split r ways; fc on stage 0 (devices 0..r-1), loss and ones on stage 1 (devices
// r..2r-1), fc's output sent from device k to r + k, the loss all-reduced over stage 1. Stage 0's device k:
//   0 load x[k]   1 load w   2 compute fc[k]   3 send fc[k] -> r+k #k   4 free x[k]   5 free fc[k]
// stage 1's device r+k:
//   0 recv fc[k] <- k #k   1 compute loss[k]   2 compute ones[k]   3 all-reduce #r of the loss parts
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <numeric>

#include "loom/exec/exec_plan.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"
#include "loom/plan/primitives.h"

namespace loom::exec::testing {

inline const ir::Graph& tiny_graph() {
  static const ir::Graph graph = [] {
    ir::GraphBuilder b("exec_tiny", ops::builtin_ops());
    const ir::TensorId x = b.input("x", ir::Shape{12, 8}, ir::DType::f32);
    const ir::TensorId w = b.parameter("w", ir::Shape{8, 8}, ir::DType::f32);
    const ir::TensorId h = b.op("linear", "fc", {x, w});
    b.set_loss(b.op("mean", "loss", {h}));
    b.op("fill_like", "ones", {h});
    auto graph = std::move(b).finish();
    EXPECT_TRUE(graph) << graph.error().to_string();
    return graph.value_or(ir::Graph{});
  }();
  return graph;
}

// A plan and its ExecPlan, kept together at a fixed address (the ExecPlan points at the plan).
struct Fixture {
  plan::Plan plan;
  ExecPlan exec;
  std::vector<std::vector<plan::SubOpId>> parts;  // by op (fc, loss, ones): the parts, in order

  Fixture() = default;
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  const plan::SubOp& part(std::size_t op, int k) const { return plan.sub_op(parts[op][static_cast<std::size_t>(k)]); }

  // A buffer holding `piece` on `device` (4 bytes an element: every tensor here is f32).
  BufferId buffer(int device, const plan::SubTensor& piece) { return exec.add_buffer(device, piece, piece.numel() * 4); }
  void emit(int device, Instruction instruction) { exec.programs[static_cast<std::size_t>(device)].push_back(std::move(instruction)); }
  BufferId load(int device, const plan::SubTensor& piece) {
    const BufferId b = buffer(device, piece);
    emit(device, Load{b});
    return b;
  }
  // Computes `op`'s part k on `device` from the given input buffers; returns the output buffer.
  BufferId compute(int device, std::size_t op, int k, std::vector<BufferId> inputs) {
    const plan::SubOp& s = part(op, k);
    const BufferId out = buffer(device, s.outputs[0]);
    emit(device, Compute{s.id, std::move(inputs), {out}});
    return out;
  }
  // An all-reduce over `group` of the loss parts `in` (aligned with the group); returns the outputs.
  std::vector<BufferId> all_reduce_loss(const std::vector<int>& group, const std::vector<BufferId>& in, std::int64_t tag) {
    std::vector<BufferId> out;
    for (std::size_t i = 0; i < group.size(); ++i) {
      const int d = group[i];
      out.push_back(buffer(d, plan::SubTensor::whole(ir::TensorId(3), ir::Shape{})));
      emit(d, Collective{comm::Primitive::all_reduce, group, tag, in[i], out.back()});
    }
    return out;
  }
};

inline constexpr std::size_t kFc = 0, kLoss = 1, kOnes = 2;

// The plan with fc, loss and ones split n ways along the batch, part k of op on device(op, k).
inline void split_plan(Fixture& f, int n, const std::function<int(std::size_t, int)>& device) {
  auto made = plan::make_plan(tiny_graph(), ops::builtin_ops());
  ASSERT_TRUE(made) << made.error().to_string();
  f.plan = std::move(*made);
  for (std::uint32_t op = 0; op < 3; ++op) {
    const plan::SubOpId whole = f.plan.parts[op].front();
    const auto batch = plan::dim_identifier(f.plan, whole, false, 0, 0);
    ASSERT_TRUE(batch) << "op " << op;
    auto split = plan::trans(f.plan, whole, plan::SplitAlgo{*batch}, n);
    ASSERT_TRUE(split) << split.error().to_string();
    for (int k = 0; k < n; ++k) ASSERT_TRUE(plan::assign(f.plan, (*split)[static_cast<std::size_t>(k)], device(op, k)));
    f.parts.push_back(*split);
  }
  f.exec.plan = &f.plan;
}

inline std::unique_ptr<Fixture> data_parallel(int n, bool async = false) {
  auto f = std::make_unique<Fixture>();
  split_plan(*f, n, [](std::size_t, int k) { return k; });
  f->exec.num_devices = n;
  f->exec.collectives.push_back({ir::TensorId(3), "V->R all-reduce"});
  f->exec.programs.resize(static_cast<std::size_t>(n));
  std::vector<int> group(static_cast<std::size_t>(n));
  std::iota(group.begin(), group.end(), 0);
  std::vector<BufferId> loss, fc;
  for (int k = 0; k < n; ++k) {
    const BufferId x = f->load(k, f->part(kFc, k).inputs[0]);
    const BufferId w = f->load(k, f->part(kFc, k).inputs[1]);
    fc.push_back(f->compute(k, kFc, k, {x, w}));
    f->emit(k, Free{x});
    loss.push_back(f->compute(k, kLoss, k, {fc.back()}));
    if (async) {
      const BufferId sum = f->buffer(k, plan::SubTensor::whole(ir::TensorId(3), ir::Shape{}));
      f->emit(k, CollectiveStart{comm::Primitive::all_reduce, group, 0, {loss.back()}, {sum}});
    }
    f->compute(k, kOnes, k, {kNoBuffer});
    if (async) f->emit(k, CollectiveWait{0});
  }
  if (!async) f->all_reduce_loss(group, loss, 0);
  for (int k = 0; k < n; ++k) f->emit(k, Free{fc[static_cast<std::size_t>(k)]});
  return f;
}

inline std::unique_ptr<Fixture> gathered(int n, bool async = false) {
  auto f = std::make_unique<Fixture>();
  split_plan(*f, n, [](std::size_t, int k) { return k; });
  f->exec.num_devices = n;
  f->exec.collectives.push_back({ir::TensorId(1), "D->R all-gather"});
  f->exec.programs.resize(static_cast<std::size_t>(n));
  std::vector<int> group(static_cast<std::size_t>(n));
  std::iota(group.begin(), group.end(), 0);
  for (int k = 0; k < n; ++k) {
    const BufferId x = f->load(k, f->part(kFc, k).inputs[0]);
    plan::SubTensor rows = f->part(kFc, k).inputs[1];
    rows.box[0] = {8 * k / n, 8 * (k + 1) / n, 1};
    const BufferId shard = f->load(k, rows);
    const BufferId w = f->buffer(k, f->part(kFc, k).inputs[1]);
    if (async) f->emit(k, CollectiveStart{comm::Primitive::all_gather, group, 0, {shard}, {w}});
    f->compute(k, kOnes, k, {kNoBuffer});
    f->emit(k, async ? Instruction(CollectiveWait{0}) : Instruction(Collective{comm::Primitive::all_gather, group, 0, shard, w}));
    const BufferId fc = f->compute(k, kFc, k, {x, w});
    f->emit(k, Free{x});
    f->emit(k, Free{w});
    f->compute(k, kLoss, k, {fc});
  }
  return f;
}

inline std::unique_ptr<Fixture> pipeline(int r) {
  auto f = std::make_unique<Fixture>();
  split_plan(*f, r, [r](std::size_t op, int k) { return op == kFc ? k : r + k; });
  f->exec.num_devices = 2 * r;
  f->exec.programs.resize(static_cast<std::size_t>(2 * r));
  std::vector<BufferId> loss;
  std::vector<int> stage1;
  for (int k = 0; k < r; ++k) {
    const BufferId x = f->load(k, f->part(kFc, k).inputs[0]);
    const BufferId w = f->load(k, f->part(kFc, k).inputs[1]);
    const BufferId fc = f->compute(k, kFc, k, {x, w});
    f->emit(k, Send{r + k, k, fc});
    f->emit(k, Free{x});
    f->emit(k, Free{fc});
    const BufferId got = f->buffer(r + k, f->part(kFc, k).outputs[0]);
    f->emit(r + k, Recv{k, k, got});
    loss.push_back(f->compute(r + k, kLoss, k, {got}));
    f->compute(r + k, kOnes, k, {kNoBuffer});
    f->exec.collectives.push_back({ir::TensorId(2), "p2p move"});
    stage1.push_back(r + k);
  }
  f->all_reduce_loss(stage1, loss, r);
  f->exec.collectives.push_back({ir::TensorId(3), "V->R all-reduce"});
  return f;
}

}  // namespace loom::exec::testing
