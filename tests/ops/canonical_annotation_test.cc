// Every op of the families below resolves on a sample call, and the annotation text it registers is
// canonical: printing the parsed annotation gives the same text back.
#include <set>

#include <gtest/gtest.h>

#include "loom/ir/annotation.h"
#include "op_test_util.h"

namespace loom::ops {
namespace {

using ir::DType;
using ir::Shape;

struct Sample {
  std::string type;
  std::vector<Shape> shapes;
  ir::Attrs attrs;
  std::vector<DType> dtypes;  // empty: all f32
};

const std::set<std::string> kFamilies = {"elementwise", "activation", "norm", "embedding", "attention",
                                         "shape",       "reduce",     "loss", "moe"};

std::vector<Sample> samples() {
  using V = std::vector<std::int64_t>;
  const Shape x{2, 8, 16};
  const std::vector<Shape> two = {x, x};
  std::vector<Sample> s;
  for (const char* t : {"add", "sub", "mul", "div"}) s.push_back({t, {x, Shape{1, 16}}, {}, {}});
  for (const char* t : {"neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "square", "reciprocal", "acos",
                        "gelu", "relu", "silu", "softmax", "log_softmax", "dropout", "contiguous", "identity"})
    s.push_back({t, {x}, {}, {}});
  s.push_back({"scale", {x}, {{"factor", 2.0}}, {}});
  s.push_back({"pow", {x}, {{"exponent", 2.0}}, {}});
  s.push_back({"remainder", {x}, {{"divisor", 7.0}}, {DType::i64}});
  s.push_back({"clamp", {x}, {{"min", 0.0}}, {}});
  s.push_back({"where", {Shape{8, 16}, x, x}, {}, {DType::boolean, DType::f32, DType::f32}});
  s.push_back({"masked_fill", {x, Shape{8, 1}}, {{"value", 0.0}}, {DType::f32, DType::boolean}});
  s.push_back({"cast", {x}, {{"dtype", std::string("bf16")}}, {}});
  s.push_back({"swiglu", two, {}, {}});
  s.push_back({"geglu", two, {}, {}});
  s.push_back({"layer_norm", {x, Shape{16}, Shape{16}}, {}, {}});
  s.push_back({"rms_norm", {x, Shape{16}}, {}, {}});
  s.push_back({"batch_norm", {Shape{2, 4, 8, 8}, Shape{4}, Shape{4}}, {}, {}});
  s.push_back({"batch_norm_sums", {Shape{2, 4, 8, 8}}, {}, {}});
  s.push_back({"batch_norm_centered_sums", {Shape{2, 4, 8, 8}, Shape{4}, Shape{4}}, {}, {}});
  s.push_back({"batch_norm_from_sums", {Shape{2, 4, 8, 8}, Shape{4}, Shape{4}, Shape{4}, Shape{4}, Shape{4}}, {}, {}});
  s.push_back({"group_norm", {Shape{2, 4, 8, 8}, Shape{4}, Shape{4}}, {{"groups", std::int64_t{2}}}, {}});
  s.push_back({"embedding", {Shape{2, 8}, Shape{100, 16}}, {}, {DType::i64, DType::f32}});
  s.push_back({"scaled_dot_product_attention",
               {Shape{2, 8, 16, 4}, Shape{2, 2, 16, 4}, Shape{2, 2, 16, 4}, Shape{2, 1, 16, 16}}, {}, {}});
  s.push_back({"rotary_embedding", {Shape{2, 4, 16, 8}}, {}, {}});
  s.push_back({"causal_mask", {Shape{2, 4, 16, 16}}, {}, {}});
  s.push_back({"reshape", {x}, {{"shape", V{2, 8, 4, 4}}}, {}});
  s.push_back({"view", {Shape{6, 4}}, {{"shape", V{4, 6}}}, {}});
  s.push_back({"flatten", {x}, {}, {}});
  s.push_back({"unsqueeze", {x}, {{"dim", std::int64_t{0}}}, {}});
  s.push_back({"squeeze", {Shape{2, 1, 3}}, {}, {}});
  s.push_back({"transpose", {x}, {{"dim0", std::int64_t{0}}, {"dim1", std::int64_t{2}}}, {}});
  s.push_back({"permute", {x}, {{"dims", V{2, 0, 1}}}, {}});
  s.push_back({"split", {x}, {{"sizes", V{4, 12}}, {"dim", std::int64_t{2}}}, {}});
  s.push_back({"chunk", {x}, {{"chunks", std::int64_t{2}}}, {}});
  s.push_back({"concat", two, {{"dim", std::int64_t{1}}}, {}});
  s.push_back({"slice", {x}, {{"dim", std::int64_t{1}}, {"start", std::int64_t{2}}}, {}});
  s.push_back({"expand", {Shape{1, 16}}, {{"shape", V{3, 8, 16}}}, {}});
  for (const char* t : {"sum", "mean", "max", "amax"}) s.push_back({t, {x}, {{"dims", V{1}}}, {}});
  s.push_back({"argmax", {x}, {{"dim", std::int64_t{-1}}}, {}});
  s.push_back({"cross_entropy", {x, Shape{2, 8}}, {}, {DType::f32, DType::i64}});
  s.push_back({"target_logit", {x, Shape{2, 8}}, {}, {DType::f32, DType::i64}});
  s.push_back({"cross_entropy_parts", {x, Shape{2, 8}, Shape{2, 8}}, {}, {DType::f32, DType::i64, DType::f32}});
  s.push_back({"cross_entropy_from_parts", {Shape{2, 8}, Shape{2, 8}, Shape{2, 8}, Shape{2, 8}}, {},
               {DType::f32, DType::f32, DType::f32, DType::i64}});
  s.push_back({"nll_loss", {Shape{8, 16}, Shape{8}}, {}, {DType::f32, DType::i64}});
  s.push_back({"mse_loss", two, {}, {}});
  s.push_back({"moe_gate", {x, Shape{4, 16}}, {{"capacity", std::int64_t{4}}}, {}});
  s.push_back({"moe_dispatch", {x, Shape{2, 8, 4, 3}}, {}, {DType::f32, DType::boolean}});
  s.push_back({"moe_combine", {Shape{4, 2, 3, 16}, Shape{2, 8, 4, 3}}, {}, {}});
  return s;
}

TEST(OpFamilies, EveryOpHasASample) {
  std::set<std::string> sampled;
  for (const Sample& s : samples()) sampled.insert(s.type);
  for (const ir::OpDef* def : builtin_ops().all()) {
    if (kFamilies.contains(def->family)) {
      EXPECT_TRUE(sampled.contains(def->type)) << "no sample call for " << def->type;
    }
  }
}

TEST(OpFamilies, SampleAnnotationsAreCanonical) {
  for (const Sample& s : samples()) {
    auto r = testing::resolve(s.type, s.shapes, s.attrs, s.dtypes);
    ASSERT_TRUE(r) << s.type << ": " << r.error().to_string();
    auto parsed = ir::parse_annotation(r->op.annotation_text);
    ASSERT_TRUE(parsed) << s.type;
    EXPECT_EQ(ir::to_string(*parsed), r->op.annotation_text) << s.type;
    EXPECT_GE(r->flops, 0) << s.type;
  }
}

TEST(OpFamilies, DefinitionsHaveSummariesAndFlops) {
  for (const ir::OpDef* def : builtin_ops().all()) {
    if (!kFamilies.contains(def->family)) continue;
    EXPECT_FALSE(def->summary.empty()) << def->type;
    EXPECT_TRUE(static_cast<bool>(def->flops)) << def->type;
  }
}

}  // namespace
}  // namespace loom::ops
