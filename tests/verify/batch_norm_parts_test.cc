// Reference kernels of the batch-norm parts (src/verify/kernels_batch_norm_parts.cc): composed, they are
// batch_norm (value and every gradient) on random shapes; their statistics over shards of the batch add
// up to the whole; and a data-parallel plan of a small CNN whose batch norms are the parts trains exactly
// as one device (SyncBatchNorm's semantics), where the whole batch_norm op refuses a batch split.
#include <optional>
#include <set>

#include "kernel_test_util.h"
#include "loom/cluster/presets.h"
#include "loom/exec/materialize.h"
#include "loom/verify/exec_interpreter.h"
#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"
#include "loom/plan/batch.h"
#include "loom/plan/primitives.h"
#include "loom/plan/validate.h"
#include "loom/verify/graph_interpreter.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::verify::testing {
namespace {

std::mt19937_64 rng(53);

const Kernel& kernel(const char* type) { return *reference_kernels().find(type); }

std::vector<NdArray> ok(Expected<std::vector<NdArray>> result) {
  EXPECT_TRUE(result) << result.error().to_string();
  return result.value_or(std::vector<NdArray>{});
}

void add_to(NdArray& total, const NdArray& part) {
  ASSERT_EQ(total.shape, part.shape);
  for (std::size_t i = 0; i < total.data.size(); ++i) total.data[i] += part.data[i];
}

void expect_near(const NdArray& got, const NdArray& want, double tolerance, const char* what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  for (std::size_t i = 0; i < want.data.size(); ++i) EXPECT_NEAR(got.data[i], want.data[i], tolerance) << what << " " << i;
}

TEST(BatchNormPartsKernels, ComposedTheyAreBatchNorm) {
  for (int trial = 0; trial < 100; ++trial) {
    SCOPED_TRACE(trial);
    std::uniform_int_distribution<std::int64_t> size(1, 4);
    ir::Shape shape{size(rng) + 1, size(rng)};
    for (int s = 0; s < trial % 3; ++s) shape.dims.push_back(size(rng));
    const ir::Shape c{shape[1]};
    const NdArray x = random_array(shape, rng, -3, 5), w = random_array(c, rng), b = random_array(c, rng);
    const ir::Attrs attrs = {{"eps", trial % 2 ? 1e-3 : 1e-5}};
    const KernelContext ctx{attrs, {}, {}, {}, {}};
    const std::vector<NdArray> whole_in = {x, w, b};
    const auto want = ok(kernel("batch_norm").forward(ctx, whole_in));
    const NdArray dy = random_array(shape, rng);
    const auto want_grad = ok(kernel("batch_norm").backward(ctx, whole_in, want, std::vector<NdArray>{dy}));
    ASSERT_EQ(want_grad.size(), 3u);

    const std::vector<NdArray> x_only = {x};
    const auto sums = ok(kernel("batch_norm_sums").forward(ctx, x_only));
    const std::vector<NdArray> centered_in = {x, sums[0], sums[1]};
    const auto squares = ok(kernel("batch_norm_centered_sums").forward(ctx, centered_in));
    const std::vector<NdArray> from_in = {x, sums[0], squares[0], sums[1], w, b};
    const auto y = ok(kernel("batch_norm_from_sums").forward(ctx, from_in));
    expect_near(y[0], want[0], 1e-12, "y");

    // Backward in reverse order; the count gets no gradient, and x's three partials add.
    const auto d_from = ok(kernel("batch_norm_from_sums").backward(ctx, from_in, y, std::vector<NdArray>{dy}));
    ASSERT_EQ(d_from.size(), 6u);
    EXPECT_TRUE(d_from[3].data.empty());
    const auto d_centered =
        ok(kernel("batch_norm_centered_sums").backward(ctx, centered_in, squares, std::vector<NdArray>{d_from[2]}));
    const auto d_sums = ok(kernel("batch_norm_sums")
                               .backward(ctx, x_only, sums, std::vector<NdArray>{d_from[1], NdArray(c)}));
    NdArray dx = d_from[0];
    add_to(dx, d_centered[0]);
    add_to(dx, d_sums[0]);
    expect_near(dx, want_grad[0], 1e-10, "dx");
    expect_near(d_from[4], want_grad[1], 1e-10, "dw");
    expect_near(d_from[5], want_grad[2], 1e-10, "db");
  }
}

TEST(BatchNormPartsKernels, Gradients) {
  const ir::Shape shape{3, 2, 2, 2}, c{2};
  const NdArray x = random_array(shape, rng);
  expect_gradients_match("batch_norm_sums", {}, {x}, {true});
  const NdArray sum = random_array(c, rng), count(c, 6.0);
  expect_gradients_match("batch_norm_centered_sums", {}, {x, sum, count}, {true, false, false});
  expect_gradients_match("batch_norm_from_sums", {{"eps", 1e-3}},
                         {x, sum, random_array(c, rng, 1, 4), count, random_array(c, rng), random_array(c, rng)},
                         {true, true, true, false, true, true});
}

// Shards of the batch: sums, counts and centered sums (about the global mean) add up to the whole's.
TEST(BatchNormPartsKernels, BatchShardsAddUp) {
  const ir::Shape full{6, 3, 2, 2};
  const NdArray x = random_array(full, rng, -2, 4);
  const KernelContext ctx{{}, {}, {}, {}, {}};
  const std::vector<NdArray> x_only = {x};
  const auto whole = ok(kernel("batch_norm_sums").forward(ctx, x_only));
  const std::vector<NdArray> centered_in = {x, whole[0], whole[1]};
  const auto whole_squares = ok(kernel("batch_norm_centered_sums").forward(ctx, centered_in));
  NdArray sum(ir::Shape{3}), count(ir::Shape{3}), squares(ir::Shape{3});
  for (std::int64_t first : {0, 2, 4}) {
    const std::vector<std::int64_t> start = {first, 0, 0, 0};
    const NdArray shard = slice_box(x, start, ir::Shape{2, 3, 2, 2});
    const std::vector<NdArray> shard_only = {shard};
    const auto part = ok(kernel("batch_norm_sums").forward(ctx, shard_only));
    add_to(sum, part[0]);
    add_to(count, part[1]);
    const std::vector<NdArray> shard_centered = {shard, whole[0], whole[1]};
    add_to(squares, ok(kernel("batch_norm_centered_sums").forward(ctx, shard_centered))[0]);
  }
  expect_near(sum, whole[0], 1e-12, "sum");
  expect_near(count, whole[1], 0, "count");
  expect_near(squares, whole_squares[0], 1e-12, "squares");
}

// x [8, 3, 6, 6] -> conv (3 -> 4) -> batch norm parts -> relu -> mean over space -> linear -> loss.
ir::Graph cnn_training_graph(bool parts) {
  ir::GraphBuilder b("bn_cnn", ops::builtin_ops());
  const ir::TensorId x = b.input("x", ir::Shape{8, 3, 6, 6}, ir::DType::f32);
  const ir::TensorId labels = b.input("labels", ir::Shape{8}, ir::DType::i64);
  const ir::TensorId conv_w = b.parameter("conv.weight", ir::Shape{4, 3, 3, 3}, ir::DType::f32);
  const ir::TensorId bn_w = b.parameter("bn.weight", ir::Shape{4}, ir::DType::f32);
  const ir::TensorId bn_b = b.parameter("bn.bias", ir::Shape{4}, ir::DType::f32);
  const ir::TensorId fc_w = b.parameter("fc.weight", ir::Shape{5, 4}, ir::DType::f32);
  const ir::TensorId h = b.op("conv2d", "conv", {x, conv_w}, {{"padding", std::vector<std::int64_t>{1}}});
  ir::TensorId normed;
  if (parts) {
    const std::vector<ir::TensorId> sums = b.ops("batch_norm_sums", "bn.sums", {h});
    const ir::TensorId squares = b.op("batch_norm_centered_sums", "bn.squares", {h, sums[0], sums[1]});
    normed = b.op("batch_norm_from_sums", "bn", {h, sums[0], squares, sums[1], bn_w, bn_b});
  } else {
    normed = b.op("batch_norm", "bn", {h, bn_w, bn_b});
  }
  const ir::TensorId pooled = b.op("mean", "pool", {b.op("relu", "act", {normed})}, {{"dims", std::vector<std::int64_t>{2, 3}}});
  b.set_loss(b.op("cross_entropy", "loss", {b.op("linear", "fc", {pooled, fc_w}), labels}));
  auto forward = std::move(b).finish();
  EXPECT_TRUE(forward) << forward.error().to_string();
  auto training = ir::build_training_graph(*forward, ops::builtin_ops(), {.kind = ir::OptimizerKind::sgd, .lr = 0.1});
  EXPECT_TRUE(training) << training.error().to_string();
  return training.value_or(ir::Graph{});
}

// Data parallelism as the dp policy builds it from the primitives: every forward op split along its
// batch identifier over two devices, parameter-only and optimizer ops replicated.
plan::Plan data_parallel(const ir::Graph& graph) {
  auto made = plan::make_plan(graph, ops::builtin_ops());
  EXPECT_TRUE(made) << made.error().to_string();
  plan::Plan p = std::move(*made);
  const auto batch = plan::batch_identifiers(p);
  for (const ir::Op& op : graph.ops) {
    if (op.is_mirror()) continue;
    const plan::SubOpId whole = p.parts[op.id.index()].front();
    const std::optional<std::string>& id = batch[op.id.index()];
    auto parts = id ? plan::trans(p, whole, plan::SplitAlgo{*id}, 2) : plan::trans(p, whole, plan::ReplicateAlgo{}, 2);
    EXPECT_TRUE(parts) << op.name << ": " << parts.error().to_string();
    if (!parts) continue;
    for (int k = 0; k < 2; ++k) EXPECT_TRUE(plan::assign(p, (*parts)[static_cast<std::size_t>(k)], k));
  }
  return p;
}

TEST(BatchNormPartsPlan, DataParallelCnnTrainsAsOneDevice) {
  static const ir::Graph graph = cnn_training_graph(true);
  const plan::Plan p = data_parallel(graph);
  // The batch norm itself is split: its batch identifier is n in all three parts.
  const auto batch = plan::batch_identifiers(p);
  int split = 0;
  for (const ir::Op& op : graph.ops)
    if (op.type.starts_with("batch_norm") && !op.is_mirror()) split += batch[op.id.index()] == std::optional<std::string>("n");
  EXPECT_EQ(split, 3);
  ASSERT_TRUE(plan::validate_plan(p, 2));
  const std::vector<NdArray> initial = initial_values(graph, 5);
  auto reference = run_graph(graph, initial);
  ASSERT_TRUE(reference) << reference.error().to_string();
  auto run = run_plan(p, 2, initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto c = compare_runs(graph, *reference, run->values);
  ASSERT_TRUE(c) << c.error().to_string();
  for (const auto& [role, stat] : {std::pair{"activation", c->activation}, std::pair{"gradient", c->gradient},
                                   std::pair{"updated", c->updated}, std::pair{"loss", c->loss}})
    EXPECT_LT(stat.max_rel, 1e-9) << role << ": " << stat.max_rel << " (" << stat.worst << ")";
}

// What `loom verify` checks: the materialized programs (collectives and all) run on two simulated devices
// equal one device; the per-channel statistics move as all-reduces: sum, count and squares forward, the
// gradients of sum and squares backward.
TEST(BatchNormPartsPlan, MaterializedDataParallelCnnTrainsAsOneDevice) {
  static const ir::Graph graph = cnn_training_graph(true);
  static const plan::Plan p = data_parallel(graph);
  // Priced by bandwidth alone, as `loom verify` prices shrunk models (latency would make every tiny
  // transfer plain p2p).
  auto cluster = cluster::make_cluster("dgx-a100");
  ASSERT_TRUE(cluster);
  exec::MaterializeOptions options;
  options.cost_model = exec::bandwidth_only_cost(*cluster);
  auto m = exec::materialize(p, 2, options);
  ASSERT_TRUE(m) << m.error().to_string();
  std::set<std::string> reduced;
  for (const exec::CollectiveInfo& info : m->exec.collectives)
    if (info.tensor.valid() && info.rule.find("all-reduce") != std::string::npos)
      reduced.insert(graph.tensor(info.tensor).name);
  for (const char* stat : {"bn.sums:0", "bn.sums:1", "bn.squares", "bn.sums:0.grad", "bn.squares.grad"})
    EXPECT_TRUE(reduced.contains(stat)) << stat << " is not all-reduced";
  const std::vector<NdArray> initial = initial_values(graph, 9);
  auto reference = run_graph(graph, initial);
  ASSERT_TRUE(reference) << reference.error().to_string();
  auto run = run_exec_plan(m->exec, initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto c = compare_runs(graph, *reference, run->values);
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_LT(c->overall.max_rel, 1e-9) << c->overall.worst;
}

TEST(BatchNormPartsPlan, TheWholeOpRefusesABatchSplit) {
  static const ir::Graph graph = cnn_training_graph(false);
  auto made = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(made);
  EXPECT_FALSE(plan::batch_identifiers(*made)[1].has_value());  // ops[1] is bn: no batch identifier
  auto split = plan::trans(*made, made->parts[1].front(), plan::SplitAlgo{"n"}, 2);
  ASSERT_FALSE(split);
  EXPECT_NE(split.error().message.find("frozen"), std::string::npos) << split.error().message;
}

}  // namespace
}  // namespace loom::verify::testing
