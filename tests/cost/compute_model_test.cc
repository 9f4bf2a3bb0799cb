// The roofline against closed forms: a big matmul is compute-bound, an elementwise add bandwidth-bound,
// splits and backward parts scale as they should, and a measured time overrides the model.
#include "loom/cost/compute_model.h"

#include <gtest/gtest.h>

#include "cost_test_support.h"

#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"
#include "loom/plan/primitives.h"

namespace loom::cost {
namespace {

using testing::with_backward;
// Round numbers so that every expectation is a closed form (fp16 twice bf16, to tell them apart).
cluster::GpuSpec test_gpu() { return testing::test_gpu(200e12); }

constexpr std::int64_t kN = 4096;

// y = x @ w (bf16, 4096^3), a = y + x, loss = mean(a); with its backward pass.
const ir::Graph& graph() {
  static const ir::Graph g = [] {
    ir::GraphBuilder b("cost_tiny", ops::builtin_ops());
    const ir::TensorId x = b.input("x", ir::Shape{kN, kN}, ir::DType::bf16);
    const ir::TensorId w = b.parameter("w", ir::Shape{kN, kN}, ir::DType::bf16);
    const ir::TensorId y = b.op("matmul", "mm", {x, w});
    const ir::TensorId a = b.op("add", "add", {y, x});
    b.set_loss(b.op("mean", "loss", {a}));
    return with_backward(std::move(b));
  }();
  return g;
}

plan::Plan fresh_plan() {
  auto p = plan::make_plan(graph(), ops::builtin_ops());
  EXPECT_TRUE(p) << p.error().to_string();
  return std::move(*p);
}

plan::SubOpId whole_part(const plan::Plan& p, std::string_view op_name, ir::Pass pass = ir::Pass::forward) {
  for (const ir::Op& op : p.graph->ops)
    if (op.pass == pass && (pass == ir::Pass::backward ? op.is_mirror() && p.graph->op(op.mirror_of).name == op_name
                                                       : op.name == op_name))
      return p.parts[op.id.index()].front();
  ADD_FAILURE() << "no op " << op_name;
  return {};
}

ComputeModel model_of(const plan::Plan& p, const ProfileDb* profile = nullptr) {
  auto m = ComputeModel::make(p, ops::builtin_ops(), test_gpu(), profile);
  EXPECT_TRUE(m) << m.error().to_string();
  return std::move(*m);
}

TEST(ComputeModel, BigMatmulIsComputeBound) {
  const plan::Plan p = fresh_plan();
  const ComputeModel m = model_of(p);
  const ComputeEstimate e = m.estimate(whole_part(p, "mm"));
  const double flops = 2.0 * kN * kN * kN;
  EXPECT_DOUBLE_EQ(e.flops, flops);
  EXPECT_DOUBLE_EQ(e.bytes, 3.0 * kN * kN * 2);  // x, w read and y written, bf16
  EXPECT_DOUBLE_EQ(e.peak, 100e12);
  const double eff = 0.7 * flops / (flops + 5e8);  // ComputeConstants' curve, written out
  EXPECT_NEAR(eff, 0.6975, 1e-3);
  EXPECT_DOUBLE_EQ(e.efficiency, eff);
  EXPECT_DOUBLE_EQ(e.seconds, flops / (100e12 * eff));
  EXPECT_GT(e.seconds, e.bytes / 1e12 * 5);  // far from the bandwidth bound
  EXPECT_FALSE(e.measured);
}

TEST(ComputeModel, ElementwiseAddIsBandwidthBound) {
  const plan::Plan p = fresh_plan();
  const ComputeModel m = model_of(p);
  const ComputeEstimate e = m.estimate(whole_part(p, "add"));
  EXPECT_DOUBLE_EQ(e.flops, 1.0 * kN * kN);
  EXPECT_DOUBLE_EQ(e.bytes, 3.0 * kN * kN * 2);
  EXPECT_DOUBLE_EQ(e.peak, 10e12);  // vector units: the fp32 peak
  EXPECT_DOUBLE_EQ(e.seconds, 3.0 * kN * kN * 2 / (1e12 * 0.81));  // elementwise reaches 81 % of HBM
}

// A bf16 GEMM with a dimension not a multiple of 8 runs at a third of the aligned efficiency.
TEST(ComputeModel, MisalignedGemmIsSlower) {
  static const ir::Graph g = [] {
    ir::GraphBuilder b("misaligned", ops::builtin_ops());
    const ir::TensorId x = b.input("x", ir::Shape{1024, 1028}, ir::DType::bf16);
    const ir::TensorId w = b.parameter("w", ir::Shape{1028, 1024}, ir::DType::bf16);
    const ir::TensorId v = b.parameter("v", ir::Shape{1024, 1024}, ir::DType::bf16);
    const ir::TensorId y = b.op("matmul", "odd", {x, w});
    b.set_loss(b.op("mean", "loss", {b.op("matmul", "even", {y, v})}));
    return std::move(b).finish().value();
  }();
  const plan::Plan p = plan::make_plan(g, ops::builtin_ops()).value();
  const ComputeModel m = model_of(p);
  const ComputeEstimate odd = m.estimate(whole_part(p, "odd"));
  const ComputeEstimate even = m.estimate(whole_part(p, "even"));
  EXPECT_NEAR(odd.efficiency, efficiency(ir::OpClass::contraction, odd.flops) / 3, 1e-12);
  EXPECT_DOUBLE_EQ(even.efficiency, efficiency(ir::OpClass::contraction, even.flops));
}

TEST(ComputeModel, EfficiencyFallsForSmallShards) {
  EXPECT_NEAR(efficiency(ir::OpClass::contraction, 2.0 * 1024 * 1024 * 1024), 0.567, 1e-3);
  EXPECT_NEAR(efficiency(ir::OpClass::contraction, 2.0 * 512 * 512 * 512), 0.244, 1e-3);
  EXPECT_LT(efficiency(ir::OpClass::attention, 1e6), 0.01);
  EXPECT_DOUBLE_EQ(efficiency(ir::OpClass::elementwise, 1e12), 0.5);
}

TEST(ComputeModel, SplitHalvesTheFlopsAndBackwardDoublesThem) {
  plan::Plan p = fresh_plan();
  const plan::SubOpId whole = whole_part(p, "mm");
  const auto batch = plan::dim_identifier(p, whole, false, 0, 0);
  ASSERT_TRUE(batch);
  auto parts = plan::trans(p, whole, plan::SplitAlgo{*batch}, 2);
  ASSERT_TRUE(parts) << parts.error().to_string();
  const ComputeModel m = model_of(p);
  const double flops = 2.0 * kN * kN * kN;
  for (plan::SubOpId part : *parts) {
    const ComputeEstimate e = m.estimate(part);
    EXPECT_DOUBLE_EQ(e.flops, flops / 2);
    EXPECT_DOUBLE_EQ(e.bytes, 2.0 * (kN * kN / 2 + kN * kN + kN * kN / 2));
    // The backward part of each half: matmul's flops_factor (2) times its forward half.
    const plan::SubOp& s = p.sub_op(part);
    ASSERT_TRUE(s.mirror.valid());
    EXPECT_DOUBLE_EQ(m.estimate(s.mirror).flops, flops);
  }
}

TEST(ComputeModel, MeasuredTimeOverridesTheRoofline) {
  const plan::Plan p = fresh_plan();
  const plan::SubOpId mm = whole_part(p, "mm");
  ProfileDb db;
  const ComputeModel plain = model_of(p);
  const ProfileKey key = plain.profile_key(mm);
  EXPECT_EQ(key.op, "matmul");
  EXPECT_EQ(key.shapes, (std::vector<ir::Shape>{ir::Shape{kN, kN}, ir::Shape{kN, kN}}));
  EXPECT_EQ(key.dtype, ir::DType::bf16);
  EXPECT_EQ(key.device, "test-gpu");
  EXPECT_EQ(plain.profile_key(whole_part(p, "mm", ir::Pass::backward)).op, "matmul/backward");
  db.set(key, 1.25e-3);
  ProfileKey other_device = key;
  other_device.device = "other-gpu";
  db.set(other_device, 9.0);
  const ComputeModel profiled = model_of(p, &db);
  const ComputeEstimate e = profiled.estimate(mm);
  EXPECT_TRUE(e.measured);
  EXPECT_DOUBLE_EQ(e.seconds, 1.25e-3);
  EXPECT_NE(plain.seconds(mm), 1.25e-3);
  // Other instances keep the roofline.
  EXPECT_FALSE(profiled.estimate(whole_part(p, "add")).measured);
  EXPECT_DOUBLE_EQ(profiled.seconds(whole_part(p, "add")), plain.seconds(whole_part(p, "add")));
}

}  // namespace
}  // namespace loom::cost
