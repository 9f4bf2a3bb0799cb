#include "loom/ir/graph_json.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "tiny_graph.h"

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"

namespace loom::ir {
namespace {

using testing::tiny_graph;


// A graph built by hand (no catalog) whose op carries one attribute of every kind.
Graph attrs_graph() {
  Graph g;
  g.name = "attrs";
  TensorId a = g.add_tensor({{}, "a", Shape{4}, DType::bf16, TensorRole::input, {}, {}});
  g.inputs.push_back(a);
  Op op;
  op.name = "o";
  op.type = "custom";
  op.inputs = {a};
  op.outputs = {g.add_tensor({{}, "b", Shape{4}, DType::bf16, TensorRole::activation, {}, {}})};
  op.annotation = "n -> n";
  op.attrs = {{"int", std::int64_t{1}},
              {"real", 1.0},
              {"half", 0.5},
              {"tiny", 1e-300},
              {"negzero", -0.0},
              {"big_int", std::numeric_limits<std::int64_t>::max()},
              {"inf", std::numeric_limits<double>::infinity()},
              {"minus_inf", -std::numeric_limits<double>::infinity()},
              {"flag", true},
              {"text", std::string("say \"hi\"\n")},
              {"list", std::vector<std::int64_t>{1, -2, 3}},
              {"empty", std::vector<std::int64_t>{}}};
  g.add_op(std::move(op));
  return g;
}

std::string replace_once(std::string text, std::string_view from, std::string_view to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "test setup: '" << from << "' not in the JSON";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string error_of(std::string_view text) {
  Expected<Graph> graph = graph_from_json(text);
  EXPECT_FALSE(graph) << "expected an error for:\n" << text;
  return graph ? std::string() : graph.error().message;
}

TEST(GraphJson, GoldenTinyGraph) {
  const std::string expected = R"({
  "format": "loom-graph",
  "version": 1,
  "name": "tiny",
  "inputs": [0],
  "parameters": [1,2],
  "loss": 4,
  "tensors": [
    {"id":0,"name":"x","role":"input","dtype":"f32","shape":[2,3]},
    {"id":1,"name":"w","role":"parameter","dtype":"f32","shape":[4,3]},
    {"id":2,"name":"v","role":"parameter","dtype":"f32","shape":[2,4]},
    {"id":3,"name":"fc","role":"activation","dtype":"f32","shape":[2,4]},
    {"id":4,"name":"loss","role":"activation","dtype":"f32","shape":[]}
  ],
  "ops": [
    {"id":0,"name":"fc","type":"linear","pass":"forward","inputs":[0,1],"outputs":[3],"annotation":"* i+, o i+ -> * o","attrs":{}},
    {"id":1,"name":"loss","type":"einsum","pass":"forward","inputs":[3,2],"outputs":[4],"annotation":"i+ j+, i+ j+ ->","attrs":{"equation":"ij,ij->"}}
  ]
}
)";
  EXPECT_EQ(graph_to_json(tiny_graph()), expected);
}

// tiny_graph's training step: backward ops (mirror_of), gradients (owner), updated tensors (updates).
Graph training_graph() {
  Expected<Graph> graph = build_training_graph(tiny_graph(), ops::builtin_ops(), OptimizerOptions{});
  EXPECT_TRUE(graph) << graph.error().to_string();
  return graph.value_or(Graph{});
}

TEST(GraphJson, RoundTripIsExactAndByteIdentical) {
  for (const Graph& original : {tiny_graph(), attrs_graph(), training_graph(), Graph{}}) {
    const std::string first = graph_to_json(original);
    Expected<Graph> read = graph_from_json(first);
    ASSERT_TRUE(read) << read.error().to_string();
    EXPECT_EQ(*read, original);
    EXPECT_EQ(graph_to_json(*read), first);
  }
}

TEST(GraphJson, AttributeKindsSurvive) {
  const std::string text = graph_to_json(attrs_graph());
  EXPECT_NE(text.find(R"("int":1,)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("real":{"real":1.0})"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("inf":{"real":"inf"})"), std::string::npos) << text;
  Expected<Graph> read = graph_from_json(text);
  ASSERT_TRUE(read) << read.error().to_string();
  const Attrs& attrs = read->ops[0].attrs;
  EXPECT_EQ(kind_of(attrs.at("int")), AttrKind::integer);
  EXPECT_EQ(kind_of(attrs.at("real")), AttrKind::real);
  EXPECT_EQ(std::get<double>(attrs.at("real")), 1.0);
  EXPECT_EQ(kind_of(attrs.at("flag")), AttrKind::boolean);
  EXPECT_EQ(kind_of(attrs.at("text")), AttrKind::string);
  EXPECT_EQ(kind_of(attrs.at("empty")), AttrKind::int_list);
  EXPECT_TRUE(std::signbit(std::get<double>(attrs.at("negzero"))));
  EXPECT_EQ(std::get<double>(attrs.at("minus_inf")), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(std::get<std::int64_t>(attrs.at("big_int")), std::numeric_limits<std::int64_t>::max());
}

TEST(GraphJson, UntaggedFractionalNumberReadsAsRealAndNanIsTagged) {
  std::string text = replace_once(graph_to_json(attrs_graph()), R"("half":{"real":0.5})", R"("half":0.25)");
  text = replace_once(text, R"("real":{"real":1.0})", R"("real":{"real":"nan"})");
  Expected<Graph> read = graph_from_json(text);
  ASSERT_TRUE(read) << read.error().to_string();
  EXPECT_EQ(std::get<double>(read->ops[0].attrs.at("half")), 0.25);
  EXPECT_TRUE(std::isnan(std::get<double>(read->ops[0].attrs.at("real"))));
}

TEST(GraphJson, ErrorsNameTheJsonPath) {
  const std::string good = graph_to_json(tiny_graph());
  EXPECT_EQ(error_of(replace_once(good, R"("inputs":[3,2])", R"("inputs":[3,99])")),
            "ops[1].inputs[1]: tensor id 99 out of range (graph has 5 tensors)");
  EXPECT_EQ(error_of(replace_once(good, R"("inputs":[3,2])", R"("inputs":[3,-1])")),
            "ops[1].inputs[1]: tensor id -1 out of range (graph has 5 tensors)");
  EXPECT_EQ(error_of(replace_once(good, R"("inputs":[3,2])", R"("inputs":[3,1.5])")),
            "ops[1].inputs[1]: expected a tensor id (an integer), got the number 1.5");
  EXPECT_EQ(error_of(replace_once(good, R"("shape":[4,3])", R"("shape":"4x3")")),
            "tensors[1].shape: expected an array of sizes, got the string \"4x3\"");
  EXPECT_EQ(error_of(replace_once(good, R"("shape":[4,3])", R"("shape":[4,0])")),
            "tensors[1].shape[1]: size 0 must be positive");
  EXPECT_EQ(error_of(replace_once(good, R"("shape":[4,3])", R"("shape":[4,4294967296,4294967296])")),
            "tensors[1].shape: the tensor has more than 2^48 elements, Loom's limit");
  EXPECT_EQ(error_of(replace_once(good, R"("type":"linear",)", "")), "ops[0]: missing field 'type'");
  EXPECT_EQ(error_of(replace_once(good, R"("role":"input")", R"("role":"input","rank":2)")),
            "tensors[0]: unknown field 'rank'");
  EXPECT_EQ(error_of(replace_once(good, R"("id":1,"name":"w")", R"("id":7,"name":"w")")),
            "tensors[1].id: is 7, but an id must equal its position in the list (1)");
  EXPECT_EQ(error_of(replace_once(good, R"("dtype":"f32")", R"("dtype":"f33")")), "tensors[0].dtype: unknown dtype 'f33'");
  EXPECT_EQ(error_of(replace_once(good, R"("pass":"forward")", R"("pass":"sideways")")),
            "ops[0].pass: unknown pass 'sideways'");
  EXPECT_EQ(error_of(replace_once(good, R"("pass":"forward")", R"("pass":"forward","mirror_of":2)")),
            "ops[0].mirror_of: op id 2 out of range (graph has 2 ops)");
  EXPECT_EQ(error_of(replace_once(good, R"("equation":"ij,ij->")", R"("equation":null)")),
            "ops[1].attrs.equation: expected an integer, a real ({\"real\": 0.5}), a boolean, a string or an integer "
            "list, got null");
  EXPECT_EQ(error_of(replace_once(good, R"("equation":"ij,ij->")", R"("equation":[1,true])")),
            "ops[1].attrs.equation[1]: expected an integer, got true");
  EXPECT_EQ(error_of(replace_once(good, R"("equation":"ij,ij->")", R"("equation":{"real":1,"x":2})")),
            "ops[1].attrs.equation: unknown field 'x'");
  EXPECT_EQ(error_of(replace_once(good, R"("loss": 4)", R"("loss": 5)")),
            "loss: tensor id 5 out of range (graph has 5 tensors)");
  EXPECT_EQ(error_of(replace_once(good, R"("parameters": [1,2])", R"("parameters": {})")),
            "parameters: expected an array of tensor ids, got an object");
  EXPECT_EQ(error_of(replace_once(good, R"("name": "tiny",)", "")), "top level: missing field 'name'");
  EXPECT_EQ(error_of("[1, 2]"), "top level: expected an object, got an array");
}

// A traced model's constants (position ids, a mask with -inf) travel with the graph, element for element.
TEST(GraphJson, BufferValuesRoundTripWithNonFiniteElements) {
  Graph g = attrs_graph();
  const double inf = std::numeric_limits<double>::infinity();
  FullTensor mask{{}, "mask", Shape{2, 2}, DType::f32, TensorRole::buffer, {}, {}};
  mask.value = {0.0, -inf, 0.5, -1e-300};
  const TensorId id = g.add_tensor(std::move(mask));
  const std::string text = graph_to_json(g);
  EXPECT_NE(text.find(R"("value":[0.0,"-inf",0.5,-1e-300])"), std::string::npos) << text;
  Expected<Graph> read = graph_from_json(text);
  ASSERT_TRUE(read) << read.error().to_string();
  EXPECT_EQ(read->tensor(id).value, g.tensor(id).value);
  EXPECT_EQ(graph_to_json(*read), text);
}

TEST(GraphJson, BufferValueErrorsNameTheTensorAndTheFix) {
  Graph g = attrs_graph();
  FullTensor ids{{}, "ids", Shape{3}, DType::i64, TensorRole::buffer, {}, {}};
  ids.value = {0, 1, 2};
  g.add_tensor(std::move(ids));
  const std::string good = graph_to_json(g);
  EXPECT_EQ(error_of(replace_once(good, R"("value":[0.0,1.0,2.0])", R"("value":[0.0,1.0])")),
            "tensors[2].value: 2 values for tensor 'ids' of 3 elements");
  EXPECT_EQ(error_of(replace_once(good, R"("value":[0.0,1.0,2.0])", R"("value":[0.0,true,2.0])")),
            "tensors[2].value[1]: expected a number, \"inf\", \"-inf\" or \"nan\", got true");
  EXPECT_EQ(error_of(replace_once(good, R"("role":"buffer")", R"("role":"input")")),
            "tensors[2].value: tensor 'ids' has role input; only buffers carry a constant value");
}

// logits = linear(x[2, 3, 4], w) against labels[2, 3], divided by labels' counted tokens past the first
// position of each row (a causal LM's shift): tensor 3 is the count, derived from tensor 1.
Graph counted_loss_graph() {
  GraphBuilder b("counted", ops::builtin_ops());
  const TensorId x = b.input("x", {2, 3, 4}, DType::f32);
  const TensorId labels = b.input("labels", {2, 3}, DType::i64);
  const TensorId w = b.parameter("w", {5, 4}, DType::f32);
  const TensorId count = b.derived_input("labels.counted_tokens", {.from = labels, .ignore_index = -100, .trim = {{0, 0}, {1, 0}}});
  const TensorId logits = b.op("linear", "head", {x, w});
  b.set_loss(b.op("cross_entropy", "loss", {logits, labels, count}, {{"ignore_index", std::int64_t{-100}}}));
  Expected<Graph> graph = std::move(b).finish();
  EXPECT_TRUE(graph) << graph.error().to_string();
  return graph.value_or(Graph{});
}

constexpr std::string_view kDerived = R"("derived":{"from":1,"kind":"counted_tokens","ignore_index":-100,"trim":[[0,0],[1,0]]})";

TEST(GraphJson, DerivedInputRoundTripsWithItsRule) {
  const Graph g = counted_loss_graph();
  const std::string text = graph_to_json(g);
  EXPECT_NE(text.find(kDerived), std::string::npos) << text;
  Expected<Graph> read = graph_from_json(text);
  ASSERT_TRUE(read) << read.error().to_string();
  ASSERT_TRUE(read->tensor(TensorId(3)).derived.has_value());
  EXPECT_EQ(read->tensor(TensorId(3)).derived, g.tensor(TensorId(3)).derived);
  EXPECT_EQ(graph_to_json(*read), text);
  // Without a trim the field is left out and reads back as none.
  Expected<Graph> untrimmed = graph_from_json(replace_once(text, R"(,"trim":[[0,0],[1,0]])", ""));
  ASSERT_TRUE(untrimmed) << untrimmed.error().to_string();
  EXPECT_TRUE(untrimmed->tensor(TensorId(3)).derived->trim.empty());
}

TEST(GraphJson, MalformedDerivedInputIsRefusedNamingTheField) {
  const std::string good = graph_to_json(counted_loss_graph());
  const auto with = [&](std::string_view rule) { return error_of(replace_once(good, kDerived, rule)); };
  EXPECT_EQ(with(R"("derived":{"from":1,"kind":"share","ignore_index":-100})"),
            "tensors[3].derived.kind: kind 'share' is not a derived input kind");
  EXPECT_EQ(with(R"("derived":{"from":1,"ignore_index":-100})"), "tensors[3].derived: missing field 'kind'");
  EXPECT_EQ(with(R"("derived":{"from":1,"kind":"counted_tokens","ignore_index":-100,"count":2})"),
            "tensors[3].derived: unknown field 'count'");
  EXPECT_EQ(with(R"("derived":{"from":1,"kind":"counted_tokens","ignore_index":-100,"trim":[[0,0,0]]})"),
            "tensors[3].derived.trim[0]: expected a [front, back] pair, got an array");
  EXPECT_NE(with(R"("derived":{"from":9,"kind":"counted_tokens","ignore_index":-100})").find("tensors[3].derived.from"),
            std::string::npos);
  EXPECT_EQ(with(R"("derived":{"from":0,"kind":"counted_tokens","ignore_index":-100})"),
            "tensor 'labels.counted_tokens' (%3): field \"derived\": 'from' is 'x', a f32 input");
  EXPECT_EQ(with(R"("derived":{"from":1,"kind":"counted_tokens","ignore_index":-100,"trim":[[0,0]]})"),
            "tensor 'labels.counted_tokens' (%3): field \"derived\": 'trim' has 1 pairs for 'labels' of shape [2, 3]");
  EXPECT_EQ(with(R"("derived":{"from":1,"kind":"counted_tokens","ignore_index":-100,"trim":[[0,0],[2,1]]})"),
            "tensor 'labels.counted_tokens' (%3): field \"derived\": 'trim' [2, 1] of dim 1 leaves nothing of size 3");
  // Only a scalar floating input is derived.
  const std::string on_x = replace_once(replace_once(good, std::string(",") + std::string(kDerived), ""), R"("shape":[2,3,4])",
                                        R"("shape":[2,3,4],"derived":{"from":1,"kind":"counted_tokens","ignore_index":-100})");
  EXPECT_NE(error_of(on_x).find("tensor 'x' (%0): field \"derived\" is set on a f32 input of shape [2, 3, 4]"),
            std::string::npos) << error_of(on_x);
}

TEST(GraphJson, RejectsOtherFormatsAndVersions) {
  const std::string good = graph_to_json(tiny_graph());
  EXPECT_EQ(error_of(replace_once(good, R"("version": 1)", R"("version": 2)")),
            "version: graph format version 2 is not supported (this build reads version 1)");
  EXPECT_EQ(error_of(replace_once(good, R"("version": 1)", R"("version": "1")")),
            "version: expected an integer, got the string \"1\"");
  EXPECT_EQ(error_of(replace_once(good, R"("format": "loom-graph")", R"("format": "onnx")")),
            "format: is 'onnx', expected 'loom-graph'");
}

TEST(GraphJson, MalformedJsonIsAnErrorWithThePosition) {
  const std::string message = error_of("{\"format\": \"loom-graph\",\n \"version\": }");
  EXPECT_TRUE(message.starts_with("line 2 column 13: malformed JSON: syntax error")) << message;
  EXPECT_TRUE(error_of("").starts_with("line 1 column 1: malformed JSON: ")) << error_of("");
}

TEST(GraphJson, RunsTheStructuralChecks) {
  const std::string good = graph_to_json(tiny_graph());
  // The einsum now reads its own output: not produced before it is read.
  EXPECT_EQ(error_of(replace_once(good, R"("inputs":[3,2])", R"("inputs":[3,4])")),
            "op 'loss' reads tensor 'loss' before any op produces it");
}

}  // namespace
}  // namespace loom::ir
