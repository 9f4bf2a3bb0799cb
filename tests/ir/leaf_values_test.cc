// The values leaves get in the interpreter and in generated programs (ir/leaf_values.h).
#include "loom/ir/leaf_values.h"

#include <gtest/gtest.h>

#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"

namespace loom::ir {
namespace {

// ids [2, 4] viewed as [8] before a 16-row embedding (as a traced model flattens its ids); labels [8]
// into a 16-class cross entropy; a mask [2, 4] that only a cumsum reads (its values are not indices).
struct Fixture {
  Graph graph;
  TensorId ids, labels, mask;
};

Fixture build() {
  GraphBuilder b("bounds", ops::builtin_ops());
  Fixture f;
  f.ids = b.input("ids", Shape{2, 4}, DType::i64);
  f.labels = b.input("labels", Shape{8}, DType::i64);
  f.mask = b.input("mask", Shape{2, 4}, DType::i64);
  const TensorId table = b.parameter("table", Shape{16, 6}, DType::f32);
  const TensorId flat = b.op("view", "flat", {f.ids}, {{"shape", std::vector<std::int64_t>{8}}});
  const TensorId x = b.op("embedding", "embed", {flat, table});
  b.op("cumsum", "positions", {f.mask}, {{"dim", std::int64_t{1}}});
  const TensorId w = b.parameter("head", Shape{16, 6}, DType::f32);
  const TensorId logits = b.op("linear", "logits", {x, w});
  b.set_loss(b.op("cross_entropy", "loss", {logits, f.labels}));
  auto graph = std::move(b).finish();
  EXPECT_TRUE(graph) << graph.error().to_string();
  f.graph = graph ? std::move(*graph) : Graph{};
  return f;
}

TEST(LeafValues, IntegerBoundsFollowShapeOpsToTheirIndexingReader) {
  const Fixture f = build();
  EXPECT_EQ(integer_bound(f.graph, f.ids), 16);     // through the view, the embedding's rows
  EXPECT_EQ(integer_bound(f.graph, f.labels), 16);  // the loss's classes
  EXPECT_EQ(integer_bound(f.graph, f.mask), 2);     // a cumsum changes values: not followed
}

}  // namespace
}  // namespace loom::ir
