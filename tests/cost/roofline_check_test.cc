// The roofline next to measurements: one row per measured distinct key, the ratio the roofline's own
// estimate over the measured time, and per-class medians and worst cases.
#include "loom/cost/roofline_check.h"

#include <gtest/gtest.h>

#include "cost_test_support.h"

#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"

namespace loom::cost {
namespace {

using testing::with_backward;
using testing::test_gpu;

const ir::Graph& graph() {
  static const ir::Graph g = [] {
    ir::GraphBuilder b("roofline_check", ops::builtin_ops());
    const ir::TensorId x = b.input("x", ir::Shape{1024, 1024}, ir::DType::bf16);
    const ir::TensorId w = b.parameter("w", ir::Shape{1024, 1024}, ir::DType::bf16);
    const ir::TensorId y = b.op("matmul", "mm", {x, w});
    b.set_loss(b.op("mean", "loss", {b.op("add", "add", {y, x})}));
    return with_backward(std::move(b));
  }();
  return g;
}

TEST(RooflineCheck, RowsForMeasuredKeysOnly) {
  auto p = plan::make_plan(graph(), ops::builtin_ops());
  ASSERT_TRUE(p) << p.error().to_string();
  auto roofline = ComputeModel::make(*p, ops::builtin_ops(), test_gpu());
  ASSERT_TRUE(roofline) << roofline.error().to_string();
  ProfileDb db;
  ProfileKey mm, add;
  for (plan::SubOpId id : p->live_sub_ops()) {
    const ir::Op& op = p->op_of(id);
    if (op.type == "matmul" && !op.is_mirror()) mm = roofline->profile_key(id);
    if (op.type == "add" && !op.is_mirror()) add = roofline->profile_key(id);
  }
  db.set(mm, 2 * roofline->estimate(p->parts[0].front()).seconds);  // twice the roofline: ratio 0.5
  db.set(add, 1e-3);
  const std::vector<RooflineComparison> rows = compare_roofline(*p, ops::builtin_ops(), *roofline, db);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].key, add);  // key order
  EXPECT_EQ(rows[0].op_class, ir::OpClass::elementwise);
  EXPECT_DOUBLE_EQ(rows[0].measured_seconds, 1e-3);
  EXPECT_FALSE(rows[0].roofline.measured);
  EXPECT_EQ(rows[1].key, mm);
  EXPECT_EQ(rows[1].op_class, ir::OpClass::contraction);
  EXPECT_DOUBLE_EQ(rows[1].ratio(), 0.5);
}

RooflineComparison row(ir::OpClass op_class, std::string op, double roofline, double measured) {
  RooflineComparison r{.key = {.op = std::move(op)}, .op_class = op_class, .measured_seconds = measured};
  r.roofline.seconds = roofline;
  return r;
}

TEST(RooflineCheck, AccuracyByClassTakesMedianAndWorstInLogTerms) {
  const std::vector<RooflineComparison> rows = {
      row(ir::OpClass::contraction, "a", 1.0, 1.0),  row(ir::OpClass::contraction, "b", 1.0, 2.0),
      row(ir::OpClass::contraction, "c", 3.0, 1.0),  row(ir::OpClass::elementwise, "d", 1.0, 4.0),
      row(ir::OpClass::elementwise, "e", 4.0, 1.0),  row(ir::OpClass::elementwise, "f", 0.0, 1.0)};
  const std::vector<ClassAccuracy> classes = accuracy_by_class(rows);
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(classes[0].op_class, ir::OpClass::contraction);
  EXPECT_EQ(classes[0].keys, 3u);
  EXPECT_DOUBLE_EQ(classes[0].median_ratio, 1.0);
  EXPECT_DOUBLE_EQ(classes[0].worst_ratio, 3.0);  // |log 3| > |log 0.5|
  EXPECT_EQ(classes[0].worst.op, "c");
  EXPECT_EQ(classes[1].keys, 2u);  // the row without roofline work is left out
  EXPECT_DOUBLE_EQ(classes[1].median_ratio, 1.0);  // geometric midpoint of 0.25 and 4
  EXPECT_DOUBLE_EQ(classes[1].worst_ratio, 0.25);  // first of the equally far
}

}  // namespace
}  // namespace loom::cost
