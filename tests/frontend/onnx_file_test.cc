#include "loom/frontend/onnx_file.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <tuple>

#include <gtest/gtest.h>

#include "loom/ops/registry.h"

namespace loom::frontend {
namespace {

using onnx::TensorProto;

// A ModelProto built by hand, node by node, at opset 17.
class Model {
 public:
  Model() {
    model_.set_ir_version(8);
    onnx::OperatorSetIdProto* set = model_.add_opset_import();
    set->set_version(17);
    graph()->set_name("hand");
  }
  onnx::GraphProto* graph() { return model_.mutable_graph(); }

  void input(const std::string& name, std::vector<std::int64_t> dims, int type = TensorProto::FLOAT,
             const std::string& symbol = {}) {
    onnx::ValueInfoProto* in = graph()->add_input();
    in->set_name(name);
    onnx::TypeProto::Tensor* t = in->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    for (std::int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
    if (!symbol.empty()) t->mutable_shape()->add_dim()->set_dim_param(symbol);
  }
  void output(const std::string& name) { graph()->add_output()->set_name(name); }

  void initializer(const std::string& name, std::vector<std::int64_t> dims) {
    TensorProto* t = graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::FLOAT);
    std::int64_t n = 1;
    for (std::int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    for (std::int64_t i = 0; i < n; ++i) t->add_float_data(0.01f * static_cast<float>(i));
  }

  // A Constant node holding int64 elements (shape [n]) or, with `dims` empty and one value, a scalar.
  void ints(const std::string& out, std::vector<std::int64_t> values, bool scalar = false) {
    TensorProto t;
    t.set_data_type(TensorProto::INT64);
    if (!scalar) t.add_dims(static_cast<std::int64_t>(values.size()));
    for (std::int64_t v : values) t.add_int64_data(v);
    constant(out, t);
  }
  void floats(const std::string& out, std::vector<float> values, std::vector<std::int64_t> dims) {
    TensorProto t;
    t.set_data_type(TensorProto::FLOAT);
    for (std::int64_t d : dims) t.add_dims(d);
    for (float v : values) t.add_float_data(v);
    constant(out, t);
  }

  onnx::NodeProto* node(const std::string& type, std::vector<std::string> in, std::vector<std::string> out,
                        const std::string& name = {}) {
    onnx::NodeProto* n = graph()->add_node();
    n->set_op_type(type);
    n->set_name(name.empty() ? "/blk/" + type + "_" + std::to_string(graph()->node_size()) : name);
    for (const std::string& i : in) n->add_input(i);
    for (const std::string& o : out) n->add_output(o);
    return n;
  }

  std::string bytes() const { return model_.SerializeAsString(); }
  onnx::ModelProto& proto() { return model_; }

 private:
  void constant(const std::string& out, const TensorProto& value) {
    onnx::NodeProto* n = node("Constant", {}, {out});
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() = value;
  }
  onnx::ModelProto model_;
};

void set_int(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void set_float(onnx::NodeProto* n, const std::string& name, float v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void set_ints(onnx::NodeProto* n, const std::string& name, std::vector<std::int64_t> v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (std::int64_t x : v) a->add_ints(x);
}

std::map<std::string, int> op_counts(const ir::Graph& g) {
  std::map<std::string, int> counts;
  for (const ir::Op& op : g.ops) ++counts[op.type];
  return counts;
}

const ir::Op* find_op(const ir::Graph& g, const std::string& name) {
  const auto it = std::ranges::find_if(g.ops, [&](const ir::Op& op) { return op.name == name; });
  return it == g.ops.end() ? nullptr : &*it;
}

Expected<ir::Graph> read(const Model& m, const OnnxOptions& options = {}) {
  return onnx_to_graph(m.bytes(), "hand.onnx", ops::builtin_ops(), options);
}

// A GPT-style block in the ops torch.onnx emits: every mapped op type appears at least once.
Model gpt_block() {
  Model m;
  m.input("ids", {2, 4}, TensorProto::INT64);
  m.input("labels", {2, 4}, TensorProto::INT64);
  m.initializer("wte", {10, 8});
  m.initializer("wpe", {4, 8});
  m.initializer("ln.weight", {8});
  m.initializer("ln.bias", {8});
  m.initializer("qkv.weight", {8, 24});
  m.initializer("qkv.bias", {24});
  m.initializer("fc.weight", {16, 16});
  m.initializer("fc.bias", {16});
  m.initializer("proj.weight", {16, 8});
  m.node("Gather", {"wte", "ids"}, {"tok"}, "/wte/Gather");
  m.ints("pos", {0, 1, 2, 3});
  m.node("Gather", {"wpe", "pos"}, {"posemb"}, "/wpe/Gather");
  m.node("Add", {"tok", "posemb"}, {"h0"});
  set_float(m.node("LayerNormalization", {"h0", "ln.weight", "ln.bias"}, {"ln"}, "/h.0/ln_1/LayerNormalization"),
            "epsilon", 1e-5f);
  // The target shape through Shape -> Gather -> Unsqueeze -> Concat: folded, never ops.
  m.node("Shape", {"ln"}, {"lnshape"});
  m.ints("zero", {0}, true);
  set_int(m.node("Gather", {"lnshape", "zero"}, {"batch"}), "axis", 0);
  m.ints("axis0", {0});
  m.node("Unsqueeze", {"batch", "axis0"}, {"batch1"});
  m.ints("minus1_64", {-1, 8});
  set_int(m.node("Concat", {"batch1", "minus1_64"}, {"target"}), "axis", 0);
  m.ints("rows", {8, 8});
  m.node("Reshape", {"ln", "rows"}, {"flat"});
  m.node("Gemm", {"flat", "qkv.weight", "qkv.bias"}, {"qkv"}, "/h.0/attn/c_attn/Gemm");
  m.ints("three", {8, 8, 8});
  set_int(m.node("Split", {"qkv", "three"}, {"q", "k", "v"}), "axis", 1);
  m.node("Reshape", {"q", "target"}, {"q3"});
  set_ints(m.node("Transpose", {"k"}, {"kt"}), "perm", {1, 0});
  m.node("MatMul", {"q", "kt"}, {"scores"});
  m.floats("half", {0.5f}, {});
  m.node("Mul", {"scores", "half"}, {"scaled"});
  // A causal mask built from constants (Range, Less, Where): folded into one buffer.
  m.floats("neg", {-1e9f}, {});
  m.floats("zerof", {0.0f}, {});
  m.ints("r0", {0}, true);
  m.ints("r8", {8}, true);
  m.ints("r1", {1}, true);
  m.node("Range", {"r0", "r8", "r1"}, {"cols"});
  m.ints("rows_shape", {8, 1});
  m.node("Reshape", {"cols", "rows_shape"}, {"rowsidx"});
  m.node("Less", {"rowsidx", "cols"}, {"future"});
  m.node("Where", {"future", "neg", "zerof"}, {"mask"});
  m.node("Add", {"scaled", "mask"}, {"masked"});
  set_int(m.node("Softmax", {"masked"}, {"probs"}, "/h.0/attn/Softmax"), "axis", -1);
  m.node("MatMul", {"probs", "v"}, {"ctx"});
  m.node("Concat", {"ctx", "ctx"}, {"wide"})->add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("axis");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(1);
    return a;
  }());
  onnx::NodeProto* fc = m.node("Gemm", {"wide", "fc.weight", "fc.bias"}, {"fc"}, "/h.0/mlp/c_fc/Gemm");
  set_int(fc, "transB", 1);
  m.floats("three_f", {3.0f}, {});
  m.node("Pow", {"fc", "three_f"}, {"cube"});
  m.node("Tanh", {"cube"}, {"t"});
  m.node("Sqrt", {"t"}, {"s"});
  m.node("Div", {"s", "fc"}, {"d"});
  m.node("MatMul", {"d", "proj.weight"}, {"proj"});
  m.ints("back", {2, 4, 8});
  m.node("Reshape", {"proj", "back"}, {"h1"});
  m.node("Add", {"h1", "h0"}, {"h2"});
  m.ints("ax1", {1});
  m.node("Unsqueeze", {"h2", "ax1"}, {"h2u"});
  m.ints("full", {2, 3, 4, 8});
  m.node("Expand", {"h2u", "full"}, {"h2e"});
  onnx::NodeProto* mean = m.node("ReduceMean", {"h2e"}, {"h2m"});
  set_ints(mean, "axes", {1});
  set_int(mean, "keepdims", 0);
  // Logits via the tied embedding: a MatMul with the transposed weight, then shift by one token.
  set_ints(m.node("Transpose", {"wte"}, {"wte_t"}, "/lm_head/Transpose"), "perm", {1, 0});
  m.node("MatMul", {"h2m", "wte_t"}, {"logits"}, "/lm_head/MatMul");
  m.ints("s0", {0});
  m.ints("s3", {-1});
  m.ints("a1", {1});
  m.node("Slice", {"logits", "s0", "s3", "a1"}, {"shifted"});
  m.ints("s1", {1});
  m.ints("big", {std::numeric_limits<std::int64_t>::max()});
  m.node("Slice", {"labels", "s1", "big", "a1"}, {"next"});
  set_int(m.node("Cast", {"next"}, {"next64"}), "to", TensorProto::INT64);
  m.ints("flat_logits", {-1, 10});
  m.node("Reshape", {"shifted", "flat_logits"}, {"l2"});
  m.ints("flat_labels", {-1});
  m.node("Reshape", {"next64", "flat_labels"}, {"y"});
  onnx::NodeProto* loss = m.node("SoftmaxCrossEntropyLoss", {"l2", "y"}, {"loss"}, "/loss");
  set_int(loss, "ignore_index", -100);
  m.output("loss");
  return m;
}

TEST(OnnxToGraph, MapsEachOpOfAGptBlockOntoTheRegistry) {
  Expected<ir::Graph> g = read(gpt_block());
  ASSERT_TRUE(g) << g.error().to_string();
  const std::map<std::string, int> expected = {
      {"embedding", 2}, {"add", 4},       {"layer_norm", 1}, {"reshape", 5}, {"matmul", 5},  {"split", 1},
      {"permute", 2},   {"scale", 1},     {"softmax", 1},    {"concat", 1},  {"linear", 1},  {"pow", 1},
      {"tanh", 1},      {"sqrt", 1},      {"div", 1},        {"unsqueeze", 1}, {"expand", 1}, {"mean", 1},
      {"slice", 2},     {"cross_entropy", 1},
      {"ne", 1},        {"cast", 1},      {"sum", 1}};  // the labels are computed: their counted tokens by ops
  EXPECT_EQ(op_counts(*g), expected);
  // The module path survives as the op name; the Gemm with a [in, out] weight is matmul + bias add.
  EXPECT_NE(find_op(*g, "h.0.attn.Softmax"), nullptr);
  EXPECT_NE(find_op(*g, "h.0.mlp.c_fc.Gemm"), nullptr);
  EXPECT_EQ(find_op(*g, "h.0.mlp.c_fc.Gemm")->type, "linear");
  EXPECT_EQ(find_op(*g, "h.0.attn.c_attn.Gemm")->type, "add");
  EXPECT_EQ(find_op(*g, "h.0.attn.c_attn.Gemm.matmul")->type, "matmul");
  // Parameters: every initializer once (the tied wte read twice is one parameter).
  EXPECT_EQ(g->parameters.size(), 9u);
  EXPECT_EQ(g->inputs.size(), 2u);
  EXPECT_EQ(g->tensor(g->loss).shape.rank(), 0u);
  EXPECT_EQ(std::get<std::int64_t>(find_op(*g, "loss")->attrs.at("ignore_index")), -100);
}

// One node on x [2, 3, 4] (f32) and, where it takes them, constant operands; then ReduceSum to the loss.
struct OneOp {
  std::string onnx;
  std::vector<std::string> registry;  // the ops it becomes, in order (ReduceSum's sum not included)
  std::function<void(Model&, onnx::NodeProto*)> setup = [](Model&, onnx::NodeProto*) {};
  std::vector<std::string> extra_inputs = {};
};

TEST(OnnxToGraph, MapsEachOpTypeOnItsOwn) {
  const auto axis = [](std::int64_t a) { return [a](Model&, onnx::NodeProto* n) { set_int(n, "axis", a); }; };
  const std::vector<OneOp> cases = {
      {"Sub", {"sub"}, {}, {"x"}},
      {"Max", {"maximum"}, {}, {"x"}},
      {"Min", {"minimum"}, {}, {"x"}},
      {"Exp", {"exp"}},
      {"Log", {"log"}},
      {"Neg", {"neg"}},
      {"Abs", {"abs"}},
      {"Sigmoid", {"sigmoid"}},
      {"Relu", {"relu"}},
      {"LogSoftmax", {"log_softmax"}, axis(-1)},
      {"Gelu", {"gelu"}, [](Model&, onnx::NodeProto* n) {
         onnx::AttributeProto* a = n->add_attribute();
         a->set_name("approximate");
         a->set_type(onnx::AttributeProto::STRING);
         a->set_s("tanh");
       }},
      {"Flatten", {"reshape"}, axis(1)},
      {"Dropout", {}},
      {"Identity", {}},
      {"Transpose", {"permute"}},
      {"Mul", {"scale"}, [](Model& m, onnx::NodeProto*) { m.floats("c", {3.0f}, {}); }, {"c"}},
      {"Div", {"scale"}, [](Model& m, onnx::NodeProto*) { m.floats("c", {4.0f}, {}); }, {"c"}},
      {"Add", {"add"}, [](Model& m, onnx::NodeProto*) { m.floats("c", {1, 2, 3, 4}, {4}); }, {"c"}},
      {"Pow", {"square"}, [](Model& m, onnx::NodeProto*) { m.floats("c", {2.0f}, {}); }, {"c"}},
      {"Squeeze", {"unsqueeze", "squeeze"}},  // x is unsqueezed at dim 1 first (below)
      {"Gather", {"slice", "squeeze"}, [](Model& m, onnx::NodeProto* n) { m.ints("c", {1}, true); set_int(n, "axis", 2); },
       {"c"}},
      {"Gather", {"index_select"}, [](Model& m, onnx::NodeProto* n) { m.ints("c", {2, 0}); set_int(n, "axis", 1); },
       {"c"}},
      {"Slice", {"slice.dim0", "slice"},
       [](Model& m, onnx::NodeProto*) {
         m.ints("starts", {1, 0});
         m.ints("ends", {2, -1});
         m.ints("axes", {0, 2});
       },
       {"starts", "ends", "axes"}},
      {"Gemm", {"transpose", "matmul", "scale", "scale", "add"},
       [](Model& m, onnx::NodeProto* n) {
         m.initializer("w", {4, 5});
         m.initializer("b", {5});
         set_int(n, "transA", 1);
         set_float(n, "alpha", 2.0f);
         set_float(n, "beta", 0.5f);
       },
       {"w", "b"}},
      {"Expand", {"expand"}, [](Model& m, onnx::NodeProto*) { m.ints("c", {3, 2, 3, 4}); }, {"c"}},
      {"ReduceSum", {"sum"}, [](Model& m, onnx::NodeProto*) { m.ints("c", {1}); }, {"c"}},
      {"Cast", {"cast"}, [](Model&, onnx::NodeProto* n) { set_int(n, "to", TensorProto::DOUBLE); }},
  };
  for (const OneOp& c : cases) {
    SCOPED_TRACE(c.onnx + " -> " + (c.registry.empty() ? "(none)" : c.registry.back()));
    Model m;
    m.input(c.onnx == "Gemm" ? "x0" : "x", c.onnx == "Gemm" ? std::vector<std::int64_t>{4, 3}
                                                             : std::vector<std::int64_t>{2, 3, 4});
    std::string x = "x";
    if (c.onnx == "Gemm") x = "x0";
    if (c.onnx == "Squeeze") {
      m.ints("ax", {1});
      m.node("Unsqueeze", {"x", "ax"}, {"xu"});
      x = "xu";
    }
    std::vector<std::string> inputs = {x};
    inputs.insert(inputs.end(), c.extra_inputs.begin(), c.extra_inputs.end());
    onnx::NodeProto* n = m.node(c.onnx, inputs, {"y"}, "/the/op");
    if (c.setup) c.setup(m, n);
    // Constants the setup added come after the node: move the node to the end to keep the order.
    onnx::GraphProto* g = m.graph();
    int at = 0;
    while (g->node(at).name() != "/the/op") ++at;
    for (int k = at; k + 1 < g->node_size(); ++k) g->mutable_node()->SwapElements(k, k + 1);
    set_int(m.node("ReduceSum", {"y"}, {"loss"}, "/loss"), "keepdims", 0);
    m.output("loss");
    Expected<ir::Graph> graph = read(m);
    ASSERT_TRUE(graph) << graph.error().to_string();
    std::vector<std::string> types;
    for (const ir::Op& op : graph->ops) types.push_back(op.type);
    ASSERT_EQ(types.back(), "sum");
    types.pop_back();
    std::vector<std::string> expected;
    for (const std::string& r : c.registry) expected.push_back(r.substr(0, r.find('.')));
    EXPECT_EQ(types, expected);
    if (!c.registry.empty()) {
      EXPECT_EQ(graph->ops[graph->ops.size() - 2].name, "the.op");
    }
  }
}

TEST(OnnxToGraph, FoldsConstantComputationsIntoBuffersHoldingTheirElements) {
  Expected<ir::Graph> g = read(gpt_block());
  ASSERT_TRUE(g) << g.error().to_string();
  // The causal mask: a [8, 8] buffer, -1e9 above the diagonal, 0 on and below it.
  const auto mask = std::ranges::find_if(g->tensors, [](const ir::FullTensor& t) {
    return t.role == ir::TensorRole::buffer && t.shape == ir::Shape{8, 8};
  });
  ASSERT_NE(mask, g->tensors.end());
  ASSERT_EQ(mask->value.size(), 64u);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      EXPECT_EQ(mask->value[static_cast<std::size_t>(i * 8 + j)], j > i ? static_cast<double>(-1e9f) : 0.0) << i << j;
  // The target shape [batch, -1, 8], batch from Shape(ln), folded into the reshape's attribute.
  const ir::Op* q3 = nullptr;
  for (const ir::Op& op : g->ops)
    if (op.type == "reshape" && op.inputs.size() == 1 && g->tensor(op.outputs[0]).shape == ir::Shape{2, 4, 8} &&
        g->tensor(op.inputs[0]).shape == ir::Shape{8, 8})
      q3 = &op;
  ASSERT_NE(q3, nullptr);
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(q3->attrs.at("shape")), (std::vector<std::int64_t>{2, 4, 8}));
  // The position ids: an i64 buffer [4] holding 0..3.
  const ir::Op* wpe = find_op(*g, "wpe.Gather");
  ASSERT_NE(wpe, nullptr);
  EXPECT_EQ(g->tensor(wpe->inputs[0]).value, (std::vector<double>{0, 1, 2, 3}));
}

TEST(OnnxToGraph, ListsEveryUnknownOpWithItsCountAndANode) {
  Model m;
  m.input("x", {4}, TensorProto::FLOAT);
  m.node("Erf", {"x"}, {"a"}, "/mlp/act/Erf");
  m.node("Erf", {"a"}, {"b"}, "/mlp/act/Erf_1");
  onnx::NodeProto* custom = m.node("FusedThing", {"b"}, {"c"}, "/blk/FusedThing");
  custom->set_domain("com.example");
  set_int(m.node("ReduceMean", {"c"}, {"loss"}), "keepdims", 0);
  m.output("loss");
  Expected<ir::Graph> g = read(m);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("hand.onnx"), std::string::npos) << g.error().message;
  EXPECT_NE(g.error().message.find("Erf x2 (e.g. node 'mlp.act.Erf')"), std::string::npos) << g.error().message;
  EXPECT_NE(g.error().message.find("com.example::FusedThing x1"), std::string::npos) << g.error().message;
  EXPECT_NE(g.error().hint.find("loom.register_op"), std::string::npos);
}

TEST(OnnxToGraph, RefusesASymbolicDimUnlessGivenASize) {
  Model m;
  m.input("x", {}, TensorProto::FLOAT, "batch");
  set_int(m.node("ReduceMean", {"x"}, {"loss"}), "keepdims", 0);
  m.output("loss");
  Expected<ir::Graph> g = read(m);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("input 'x' has the symbolic size 'batch' at dim 0"), std::string::npos)
      << g.error().message;
  EXPECT_NE(g.error().hint.find("--onnx-dim batch=N"), std::string::npos);
  Expected<OnnxOptions> dims = parse_onnx_dims("batch=6");
  ASSERT_TRUE(dims);
  Expected<ir::Graph> sized = read(m, *dims);
  ASSERT_TRUE(sized) << sized.error().to_string();
  EXPECT_EQ(sized->tensor(sized->inputs[0]).shape, ir::Shape{6});
}

TEST(OnnxToGraph, RefusesTruncatedBytesAndAnOldOpset) {
  const std::string bytes = gpt_block().bytes();
  for (std::size_t keep : {std::size_t{0}, bytes.size() / 3, bytes.size() - 7}) {
    Expected<ir::Graph> g = onnx_to_graph(bytes.substr(0, keep), "cut.onnx", ops::builtin_ops());
    ASSERT_FALSE(g) << keep;
    EXPECT_NE(g.error().message.find("cut.onnx"), std::string::npos) << g.error().message;
    EXPECT_NE(g.error().hint.find("export it again"), std::string::npos) << g.error().hint;
  }
  Model old = gpt_block();
  old.proto().mutable_opset_import(0)->set_version(9);
  Expected<ir::Graph> g = read(old);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("opset 9 is not understood"), std::string::npos) << g.error().message;
  EXPECT_NE(g.error().hint.find("opset_version=17"), std::string::npos);
}

TEST(OnnxToGraph, AnIdentityOfAnInitializerIsItsOwnParameter) {
  // torch.onnx shares initializers of equal initial values (two zero biases) through Identity nodes.
  Model m;
  m.input("x", {2, 4}, TensorProto::FLOAT);
  m.initializer("a.bias", {4});
  m.node("Identity", {"a.bias"}, {"b.bias"});
  m.node("Add", {"x", "a.bias"}, {"y"});
  m.node("Add", {"y", "b.bias"}, {"z"});
  set_int(m.node("ReduceSum", {"z"}, {"loss"}), "keepdims", 0);
  m.output("loss");
  Expected<ir::Graph> g = read(m);
  ASSERT_TRUE(g) << g.error().to_string();
  ASSERT_EQ(g->parameters.size(), 2u);
  EXPECT_EQ(g->tensor(g->parameters[0]).name, "a.bias");
  EXPECT_EQ(g->tensor(g->parameters[1]).name, "b.bias");
}

TEST(OnnxToGraph, ALossOverInputLabelsDividesByTheirDerivedCount) {
  // With ignore_index the mean is over counted tokens: a whole-batch count the runtime takes from the labels.
  Model m;
  m.input("x", {6, 4}, TensorProto::FLOAT);
  m.input("labels", {6}, TensorProto::INT64);
  m.initializer("w", {4, 5});
  m.node("MatMul", {"x", "w"}, {"logits"});
  set_int(m.node("SoftmaxCrossEntropyLoss", {"logits", "labels"}, {"loss"}, "/loss"), "ignore_index", -100);
  m.output("loss");
  Expected<ir::Graph> g = read(m);
  ASSERT_TRUE(g) << g.error().to_string();
  const ir::Op* loss = nullptr;
  for (const ir::Op& op : g->ops)
    if (op.type == "cross_entropy") loss = &op;
  ASSERT_NE(loss, nullptr);
  ASSERT_EQ(loss->inputs.size(), 3u);
  const ir::FullTensor& count = g->tensor(loss->inputs[2]);
  ASSERT_TRUE(count.derived.has_value());
  EXPECT_EQ(count.role, ir::TensorRole::input);
  EXPECT_EQ(count.derived->from, loss->inputs[1]);
  EXPECT_EQ(count.derived->ignore_index, -100);
  EXPECT_TRUE(count.derived->trim.empty());
}

// ONNX lists a Pad's begins, then its ends, per axis (opset 18: per listed axis); the registry's pad takes
// (before, after) pairs, last dim first, as F.pad does. transformers 5 pads a causal LM's labels so.
TEST(OnnxToGraph, AConstantPadBecomesThePadOpInTorchsOrder) {
  struct Case {
    std::string name;
    std::vector<std::int64_t> pads, axes;
  };
  for (const Case& c : {Case{"every axis", {0, 0, 1, 0, 2, 0}, {}}, Case{"listed axes", {1, 0, 0, 2}, {-1, 1}}}) {
    SCOPED_TRACE(c.name);
    Model m;
    m.input("x", {2, 3, 4});
    m.ints("pads", c.pads);
    m.floats("fill", {0.5f}, {});
    std::vector<std::string> inputs = {"x", "pads", "fill"};
    if (!c.axes.empty()) {
      m.ints("axes", c.axes);
      inputs.push_back("axes");
    }
    m.node("Pad", inputs, {"y"}, "/the/Pad");
    set_int(m.node("ReduceSum", {"y"}, {"loss"}, "/loss"), "keepdims", 0);
    m.output("loss");
    Expected<ir::Graph> g = read(m);
    ASSERT_TRUE(g) << g.error().to_string();
    const ir::Op* pad = find_op(*g, "the.Pad");
    ASSERT_NE(pad, nullptr);
    EXPECT_EQ(pad->type, "pad");
    EXPECT_EQ(*ir::get_int_list(pad->attrs, "pads"), (std::vector<std::int64_t>{1, 0, 0, 2, 0, 0}));
    EXPECT_EQ(*ir::get_real(pad->attrs, "value"), 0.5);
    EXPECT_EQ(g->tensor(pad->outputs[0]).shape, (ir::Shape{2, 5, 5}));
  }
}

TEST(OnnxToGraph, APadNotInConstantModeOrWithPadsForOtherAxesIsAnError) {
  for (const auto& [mode, pads, expected] : std::vector<std::tuple<std::string, std::vector<std::int64_t>, std::string>>{
           {"reflect", {0, 1, 0, 1}, "a Pad in mode 'reflect' is not mapped"},
           {"constant", {0, 1, 0}, "its pads have 3 values for 2 axes"}}) {
    Model m;
    m.input("x", {2, 4});
    m.ints("pads", pads);
    onnx::NodeProto* n = m.node("Pad", {"x", "pads"}, {"y"});
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name("mode");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(mode);
    set_int(m.node("ReduceSum", {"y"}, {"loss"}), "keepdims", 0);
    m.output("loss");
    Expected<ir::Graph> g = read(m);
    ASSERT_FALSE(g);
    EXPECT_NE(g.error().message.find(expected), std::string::npos) << g.error().message;
  }
}

TEST(OnnxToGraph, RefusesAnOutputThatIsNotAScalarLoss) {
  Model m;
  m.input("x", {2, 4}, TensorProto::FLOAT);
  m.node("Tanh", {"x"}, {"y"});
  m.output("y");
  Expected<ir::Graph> g = read(m);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("not a scalar loss"), std::string::npos) << g.error().message;
}

// Found by fuzz/onnx_fuzz.cc (UBSan): a NaN float constant used as a Gather index was converted to an integer,
// which is undefined behaviour; it now reads as -inf does, an index out of range.
TEST(OnnxToGraph, ANanIndexIsOutOfRangeNotUndefinedBehaviour) {
  Model m;
  m.input("x", {2, 4}, TensorProto::FLOAT);
  m.ints("data", {5, 6, 7});
  m.floats("nan", {std::numeric_limits<float>::quiet_NaN()}, {1});
  set_int(m.node("Gather", {"data", "nan"}, {"picked"}), "axis", 0);
  set_int(m.node("ReduceSum", {"x"}, {"loss"}), "keepdims", 0);
  m.output("loss");
  Expected<ir::Graph> g = read(m);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("is out of range for a dim of 3"), std::string::npos) << g.error().message;
}

// Found by fuzz/onnx_fuzz.cc (UBSan): a Reshape target whose sizes multiply past 2^63 overflowed a signed
// product; it is an error naming the target, as a negative size other than -1 is.
TEST(OnnxToGraph, AReshapeTargetPastTwoToThe63IsAnError) {
  for (const auto& [target, expected] : std::vector<std::pair<std::vector<std::int64_t>, std::string>>{
           {{std::int64_t{1} << 57, 224}, "cannot reshape [2, 4] to [144115188075855872, 224]: more than 2^63 elements"},
           {{-4, -2}, "a Reshape target dim of -4 in [-4, -2]"}}) {
    Model m;
    m.input("x", {2, 4}, TensorProto::FLOAT);
    m.ints("target", target);
    m.node("Reshape", {"x", "target"}, {"y"});
    set_int(m.node("ReduceSum", {"y"}, {"loss"}), "keepdims", 0);
    m.output("loss");
    Expected<ir::Graph> g = read(m);
    ASSERT_FALSE(g);
    EXPECT_NE(g.error().message.find(expected), std::string::npos) << g.error().message;
  }
}

// Found by fuzz/onnx_fuzz.cc (ASan): a constant Transpose with a perm entry past its rank read out of bounds.
TEST(OnnxToGraph, ATransposePermThatIsNotAPermutationIsAnError) {
  Model m;
  m.input("x", {2, 4}, TensorProto::FLOAT);
  m.floats("c", {1, 2, 3, 4}, {2, 2});
  set_ints(m.node("Transpose", {"c"}, {"t"}), "perm", {0, 5});
  set_int(m.node("ReduceSum", {"x"}, {"loss"}), "keepdims", 0);
  m.output("loss");
  Expected<ir::Graph> g = read(m);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("Transpose perm [0, 5] is not a permutation of the 2 dims"), std::string::npos)
      << g.error().message;
}

TEST(ParseOnnxDims, ReadsPairsAndRefusesBadOnes) {
  Expected<OnnxOptions> ok = parse_onnx_dims("batch=8,seq=128");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->dims.at("batch"), 8);
  EXPECT_EQ(ok->dims.at("seq"), 128);
  for (const char* bad : {"batch", "batch=0", "batch=x", "=4", "b=1,b=2", "b=3x"})
    EXPECT_FALSE(parse_onnx_dims(bad)) << bad;
}

TEST(IsOnnxPath, PicksByTheExtension) {
  EXPECT_TRUE(is_onnx_path("dir/gpt2.onnx"));
  EXPECT_FALSE(is_onnx_path("gpt2.json"));
  EXPECT_FALSE(is_onnx_path("onnx"));
}

}  // namespace
}  // namespace loom::frontend
