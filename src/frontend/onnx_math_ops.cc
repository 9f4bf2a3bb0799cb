// ONNX arithmetic, linear algebra, normalization, activation and loss nodes as registry ops. A constant
// operand becomes an attribute where the registry has one (x * c: scale; x ^ c: pow), else a buffer.
#include <limits>

#include <fmt/format.h>

#include "onnx_reader.h"

namespace loom::frontend::onnx_reader {
namespace {

using Out = Expected<std::vector<Value>>;

std::vector<Value> one(Value v) { return {std::move(v)}; }

// The constant's one element, when it has exactly one.
std::optional<double> scalar(const Value* v) {
  if (v == nullptr || !v->constant || v->constant->values.size() != 1) return std::nullopt;
  return v->constant->values[0];
}

Expected<Value*> required(const NodeCall& call, std::size_t i) {
  if (Value* v = call.input(i)) return v;
  return fail(fmt::format("input {} is missing", i));
}

Out binary(Reader& r, const NodeCall& call, const std::string& type) {
  LOOM_ASSIGN_OR_RETURN(Value * a, required(call, 0));
  LOOM_ASSIGN_OR_RETURN(Value * b, required(call, 1));
  const bool floating = ir::is_floating(r.dtype(*a)) && ir::is_floating(r.dtype(*b));
  if (floating && type == "mul" && scalar(a) && !scalar(b)) std::swap(a, b);  // c * x is x * c: a scale
  if (floating && (type == "mul" || type == "div") && scalar(b) && !a->constant) {
    const double factor = type == "mul" ? *scalar(b) : 1.0 / *scalar(b);
    if (factor == 1.0) return one(*a);
    return one(r.emit("scale", call.name, {r.tensor(*a, call.node.input(0))}, {{"factor", factor}}));
  }
  return one(r.emit(type, call.name,
                    {r.tensor(*a, call.node.input(0)), r.tensor(*b, call.node.input(1))}));
}

template <const char* Type>
Out binary_op(Reader& r, const NodeCall& call) {
  return binary(r, call, Type);
}

Out unary(Reader& r, const NodeCall& call, const std::string& type, ir::Attrs attrs = {}) {
  LOOM_ASSIGN_OR_RETURN(Value * x, required(call, 0));
  return one(r.emit(type, call.name, {r.tensor(*x, call.node.input(0))}, std::move(attrs)));
}

template <const char* Type>
Out unary_op(Reader& r, const NodeCall& call) {
  return unary(r, call, Type);
}

Out pow_op(Reader& r, const NodeCall& call) {
  const std::optional<double> exponent = scalar(call.input(1));
  if (!exponent)
    return fail("a Pow whose exponent is not one constant is not mapped", "export with a constant exponent");
  if (*exponent == 2.0) return unary(r, call, "square");
  if (*exponent == 0.5) return unary(r, call, "sqrt");
  return unary(r, call, "pow", {{"exponent", *exponent}});
}

Out softmax_op(Reader& r, const NodeCall& call, const std::string& type) {
  return unary(r, call, type, {{"dim", attr_int(call.node, "axis", -1)}});
}
Out softmax(Reader& r, const NodeCall& call) { return softmax_op(r, call, "softmax"); }
Out log_softmax(Reader& r, const NodeCall& call) { return softmax_op(r, call, "log_softmax"); }

Out gelu(Reader& r, const NodeCall& call) {
  const std::string approximate = attr_string(call.node, "approximate", "none");
  return unary(r, call, "gelu", approximate == "none" ? ir::Attrs{} : ir::Attrs{{"approximate", approximate}});
}

Out matmul(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * a, required(call, 0));
  LOOM_ASSIGN_OR_RETURN(Value * b, required(call, 1));
  return one(r.emit("matmul", call.name, {r.tensor(*a, call.node.input(0)), r.tensor(*b, call.node.input(1))}));
}

// alpha A' B' + beta C. With B transposed, a 1-D C and no scaling it is torch's Linear: one linear op.
// Otherwise (HuggingFace's Conv1D keeps W as [in, out]) a matmul then an add, as the tracer lowers addmm.
Out gemm(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * a, required(call, 0));
  LOOM_ASSIGN_OR_RETURN(Value * b, required(call, 1));
  Value* c = call.input(2);
  const onnx::NodeProto& n = call.node;
  const double alpha = attr_float(n, "alpha", 1.0), beta = attr_float(n, "beta", 1.0);
  const bool trans_a = attr_int(n, "transA", 0) != 0, trans_b = attr_int(n, "transB", 0) != 0;
  ir::TensorId x = r.tensor(*a, n.input(0)), w = r.tensor(*b, n.input(1));
  if (!trans_a && trans_b && alpha == 1.0 && beta == 1.0 && (c == nullptr || r.dims(*c).size() == 1)) {
    std::vector<ir::TensorId> inputs = {x, w};
    if (c != nullptr) inputs.push_back(r.tensor(*c, n.input(2)));
    return one(r.emit("linear", call.name, inputs));
  }
  const ir::Attrs swap = {{"dim0", std::int64_t{0}}, {"dim1", std::int64_t{1}}};
  if (trans_a) x = r.emit("transpose", call.name + ".a_t", {x}, swap).tensor;
  if (trans_b) w = r.emit("transpose", call.name + ".b_t", {w}, swap).tensor;
  const bool more = alpha != 1.0 || (c != nullptr && beta != 0.0);
  Value y = r.emit("matmul", more ? call.name + ".matmul" : call.name, {x, w});
  if (alpha != 1.0) y = r.emit("scale", c != nullptr && beta != 0.0 ? call.name + ".alpha" : call.name, {y.tensor},
                               {{"factor", alpha}});
  if (c == nullptr || beta == 0.0) return one(y);
  ir::TensorId bias = r.tensor(*c, n.input(2));
  if (beta != 1.0) bias = r.emit("scale", call.name + ".beta", {bias}, {{"factor", beta}}).tensor;
  return one(r.emit("add", call.name, {y.tensor, bias}));
}

Out layer_norm(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * x, required(call, 0));
  LOOM_ASSIGN_OR_RETURN(Value * w, required(call, 1));
  const std::size_t rank = r.dims(*x).size();
  LOOM_ASSIGN_OR_RETURN(std::int64_t axis, normalize_axis(attr_int(call.node, "axis", -1), rank, "axis"));
  if (axis + 1 != static_cast<std::int64_t>(rank))
    return fail(fmt::format("a LayerNormalization over dims {}.. (not only the last) is not mapped", axis),
                "normalize over the last dim (torch.nn.LayerNorm(hidden))");
  std::vector<ir::TensorId> inputs = {r.tensor(*x, call.node.input(0)), r.tensor(*w, call.node.input(1))};
  if (Value* b = call.input(2)) inputs.push_back(r.tensor(*b, call.node.input(2)));
  return one(r.emit("layer_norm", call.name, inputs, {{"eps", attr_float(call.node, "epsilon", 1e-5)}}));
}

Out reduce(Reader& r, const NodeCall& call, const std::string& type) {
  LOOM_ASSIGN_OR_RETURN(Value * x, required(call, 0));
  std::vector<std::int64_t> axes = attr_ints(call.node, "axes").value_or(std::vector<std::int64_t>{});
  if (call.input(1) != nullptr) {
    LOOM_ASSIGN_OR_RETURN(const Constant* given, call.constant_input(1, "axes"));
    axes = given->integers();
  }
  ir::Attrs attrs = {{"keepdim", attr_int(call.node, "keepdims", 1) != 0}};
  if (!axes.empty()) attrs["dims"] = axes;
  return one(r.emit(type, call.name, {r.tensor(*x, call.node.input(0))}, std::move(attrs)));
}
Out reduce_mean(Reader& r, const NodeCall& call) { return reduce(r, call, "mean"); }
Out reduce_sum(Reader& r, const NodeCall& call) { return reduce(r, call, "sum"); }

// The labels that are not ignore_index, counted by ops: sum(cast(labels != ignore)).
ir::TensorId counted_tokens_ops(Reader& r, const std::string& name, ir::TensorId labels, std::int64_t ignore) {
  const ir::TensorId ignored = r.builder.buffer(name + ".ignore_index", ir::Shape{}, r.builder.dtype(labels));
  if (ignored.valid()) r.buffer_values.emplace_back(ignored, std::vector<double>{static_cast<double>(ignore)});
  const ir::TensorId counted = r.emit("ne", name + ".counted", {labels, ignored}).tensor;
  const ir::TensorId ones = r.emit("cast", name + ".counted_f32", {counted}, {{"dtype", std::string("f32")}}).tensor;
  std::vector<std::int64_t> dims(r.builder.shape(labels).rank());
  for (std::size_t k = 0; k < dims.size(); ++k) dims[k] = static_cast<std::int64_t>(k);
  return r.emit("sum", name + ".counted_tokens", {ones}, {{"dims", dims}}).tensor;
}

// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss: scores [n, c, d...] against labels [n, d...],
// the mean over tokens. The registry's losses take the class dim last, so a rank > 2 input is permuted.
Out loss(Reader& r, const NodeCall& call, const std::string& type) {
  LOOM_ASSIGN_OR_RETURN(Value * scores, required(call, 0));
  LOOM_ASSIGN_OR_RETURN(Value * labels, required(call, 1));
  if (call.input(2) != nullptr)
    return fail("class weights are not mapped", "export the loss without weight= (the plain mean over tokens)");
  const std::string reduction = attr_string(call.node, "reduction", "mean");
  if (reduction != "mean")
    return fail(fmt::format("reduction '{}' is not mapped (only 'mean')", reduction),
                "reduce the loss with its mean (the default of torch's cross_entropy)");
  ir::TensorId x = r.tensor(*scores, call.node.input(0));
  const std::size_t rank = r.dims(*scores).size();
  if (rank > 2) {
    std::vector<std::int64_t> dims = {0};
    for (std::size_t k = 2; k < rank; ++k) dims.push_back(static_cast<std::int64_t>(k));
    dims.push_back(1);
    x = r.emit("permute", call.name + ".classes_last", {x}, {{"dims", dims}}).tensor;
  }
  ir::Attrs attrs;
  const ir::TensorId label_tensor = r.tensor(*labels, call.node.input(1));
  std::vector<ir::TensorId> inputs = {x, label_tensor};
  if (const std::int64_t none = attr_int(call.node, "ignore_index", std::numeric_limits<std::int64_t>::min());
      none != std::numeric_limits<std::int64_t>::min()) {
    attrs["ignore_index"] = none;
    // The mean over counted tokens divides by the whole batch's count, given as a derived input (loss.cc)
    // when the labels are a graph input; labels computed in the graph are counted by ops over them.
    if (r.builder.role(label_tensor) == ir::TensorRole::input)
      inputs.push_back(r.builder.derived_input(call.name + ".counted_tokens", {.from = label_tensor, .ignore_index = none}));
    else
      inputs.push_back(counted_tokens_ops(r, call.name, label_tensor, none));
  }
  return one(r.emit(type, call.name, inputs, std::move(attrs)));
}
Out cross_entropy(Reader& r, const NodeCall& call) { return loss(r, call, "cross_entropy"); }
Out nll_loss(Reader& r, const NodeCall& call) { return loss(r, call, "nll_loss"); }

Out where(Reader& r, const NodeCall& call) {
  std::vector<ir::TensorId> inputs;
  for (std::size_t k = 0; k < 3; ++k) {
    LOOM_ASSIGN_OR_RETURN(Value * v, required(call, k));
    inputs.push_back(r.tensor(*v, call.node.input(static_cast<int>(k))));
  }
  return one(r.emit("where", call.name, inputs));
}

Out cast(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * x, required(call, 0));
  LOOM_ASSIGN_OR_RETURN(ir::DType to, dtype_of(static_cast<std::int32_t>(attr_int(call.node, "to", 1))));
  if (to == r.dtype(*x)) return one(*x);
  return unary(r, call, "cast", {{"dtype", std::string(ir::name(to))}});
}

constexpr char kAdd[] = "add", kSub[] = "sub", kMul[] = "mul", kDiv[] = "div", kEq[] = "eq", kLt[] = "lt",
               kGt[] = "gt", kLe[] = "le", kGe[] = "ge", kMax[] = "maximum", kMin[] = "minimum";
constexpr char kSqrt[] = "sqrt", kTanh[] = "tanh", kExp[] = "exp", kLog[] = "log", kNeg[] = "neg", kAbs[] = "abs",
               kSigmoid[] = "sigmoid", kRelu[] = "relu";

}  // namespace

void add_math_handlers(std::vector<std::pair<std::string_view, Handler>>& t) {
  t.insert(t.end(), {{"Add", binary_op<kAdd>}, {"Sub", binary_op<kSub>}, {"Mul", binary_op<kMul>},
                     {"Div", binary_op<kDiv>}, {"Equal", binary_op<kEq>}, {"Less", binary_op<kLt>},
                     {"Greater", binary_op<kGt>}, {"LessOrEqual", binary_op<kLe>},
                     {"GreaterOrEqual", binary_op<kGe>}, {"Max", binary_op<kMax>}, {"Min", binary_op<kMin>},
                     {"Sqrt", unary_op<kSqrt>}, {"Tanh", unary_op<kTanh>}, {"Exp", unary_op<kExp>},
                     {"Log", unary_op<kLog>}, {"Neg", unary_op<kNeg>}, {"Abs", unary_op<kAbs>},
                     {"Sigmoid", unary_op<kSigmoid>}, {"Relu", unary_op<kRelu>}, {"Pow", pow_op},
                     {"Softmax", softmax}, {"LogSoftmax", log_softmax}, {"Gelu", gelu}, {"MatMul", matmul},
                     {"Gemm", gemm}, {"LayerNormalization", layer_norm}, {"ReduceMean", reduce_mean},
                     {"ReduceSum", reduce_sum}, {"SoftmaxCrossEntropyLoss", cross_entropy},
                     {"NegativeLogLikelihoodLoss", nll_loss}, {"Where", where}, {"Cast", cast}});
}

}  // namespace loom::frontend::onnx_reader
