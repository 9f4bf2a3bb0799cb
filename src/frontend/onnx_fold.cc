// Constant folding while reading: the exporter computes shapes, position ids and masks with small ops on
// constants (Shape, Concat, Range, Where, ...). Shapes are static here, so those computations are done
// now and their results stay constants: the Graph keeps only the model's tensor work.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "onnx_reader.h"

namespace loom::frontend::onnx_reader {
namespace {

using Folded = std::optional<std::vector<Constant>>;

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

std::vector<std::int64_t> strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> s(shape.size(), 1);
  for (std::size_t k = shape.size(); k-- > 1;) s[k - 1] = s[k] * shape[k];
  return s;
}

Constant integer_constant(std::vector<std::int64_t> shape, const std::vector<std::int64_t>& values) {
  Constant c{std::move(shape), ir::DType::i64, {}};
  for (std::int64_t v : values) c.values.push_back(static_cast<double>(v));
  return c;
}

// The element of `c` that position `out_index` of the broadcast `out_shape` reads.
double broadcast_at(const Constant& c, const std::vector<std::int64_t>& out_shape, std::int64_t out_index) {
  const std::vector<std::int64_t> out_strides = strides(out_shape);
  const std::vector<std::int64_t> in_strides = strides(c.shape);
  const std::size_t offset = out_shape.size() - c.shape.size();
  std::int64_t at = 0;
  for (std::size_t k = 0; k < c.shape.size(); ++k) {
    const std::int64_t coord = (out_index / out_strides[k + offset]) % out_shape[k + offset];
    if (c.shape[k] != 1) at += coord * in_strides[k];
  }
  return c.values[static_cast<std::size_t>(at)];
}

// An elementwise op over broadcast inputs; `dtype` of the result.
Expected<Constant> elementwise(const std::vector<const Constant*>& in, ir::DType dtype,
                               const std::function<double(const std::vector<double>&)>& f) {
  std::vector<std::vector<std::int64_t>> shapes;
  for (const Constant* c : in) shapes.push_back(c->shape);
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> shape, broadcast_shapes(shapes));
  Constant out{shape, dtype, {}};
  const std::int64_t n = numel(shape);
  std::vector<double> args(in.size());
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < in.size(); ++k) args[k] = broadcast_at(*in[k], shape, i);
    out.values.push_back(f(args));
  }
  return out;
}

double to_dtype(double v, ir::DType dtype) {
  if (dtype == ir::DType::boolean) return v != 0 ? 1 : 0;
  if (!ir::is_floating(dtype)) return std::trunc(v);
  if (dtype == ir::DType::f32) return static_cast<float>(v);
  return v;
}

Expected<Constant> binary(const NodeCall& call, const Constant& a, const Constant& b) {
  const std::string& op = call.node.op_type();
  const bool integral = !ir::is_floating(a.dtype);
  const auto compare = [&](auto f) {
    return elementwise({&a, &b}, ir::DType::boolean, [f](const std::vector<double>& x) { return f(x[0], x[1]) ? 1.0 : 0.0; });
  };
  if (op == "Equal") return compare(std::equal_to<>());
  if (op == "Less") return compare(std::less<>());
  if (op == "Greater") return compare(std::greater<>());
  if (op == "LessOrEqual") return compare(std::less_equal<>());
  if (op == "GreaterOrEqual") return compare(std::greater_equal<>());
  if (op == "And") return compare([](double x, double y) { return x != 0 && y != 0; });
  if (op == "Or") return compare([](double x, double y) { return x != 0 || y != 0; });
  std::function<double(double, double)> f;
  if (op == "Add") f = std::plus<>();
  if (op == "Sub") f = std::minus<>();
  if (op == "Mul") f = std::multiplies<>();
  if (op == "Div") f = [integral](double x, double y) { return integral ? std::trunc(x / y) : x / y; };
  if (op == "Pow") f = [](double x, double y) { return std::pow(x, y); };
  if (op == "Max") f = [](double x, double y) { return std::max(x, y); };
  if (op == "Min") f = [](double x, double y) { return std::min(x, y); };
  const ir::DType dtype = a.dtype;
  return elementwise({&a, &b}, dtype,
                     [f, dtype](const std::vector<double>& x) { return to_dtype(f(x[0], x[1]), dtype); });
}

Expected<Constant> unary(const NodeCall& call, const Constant& a) {
  const std::string& op = call.node.op_type();
  std::function<double(double)> f;
  if (op == "Sqrt") f = [](double x) { return std::sqrt(x); };
  if (op == "Neg") f = [](double x) { return -x; };
  if (op == "Not") f = [](double x) { return x == 0 ? 1.0 : 0.0; };
  if (op == "Identity") f = [](double x) { return x; };
  if (op == "Reciprocal") f = [](double x) { return 1.0 / x; };
  const ir::DType dtype = a.dtype;
  return elementwise({&a}, dtype, [f, dtype](const std::vector<double>& x) { return to_dtype(f(x[0]), dtype); });
}

Expected<Constant> constant_node(const NodeCall& call) {
  const onnx::NodeProto& n = call.node;
  if (const onnx::TensorProto* t = attr_tensor(n, "value")) return constant_of(*t);
  for (const onnx::AttributeProto& a : n.attribute()) {
    if (a.name() == "value_float") return Constant{{}, ir::DType::f32, {a.f()}};
    if (a.name() == "value_int") return integer_constant({}, {a.i()});
    if (a.name() == "value_ints")
      return integer_constant({static_cast<std::int64_t>(a.ints_size())}, {a.ints().begin(), a.ints().end()});
    if (a.name() == "value_floats") {
      Constant c{{static_cast<std::int64_t>(a.floats_size())}, ir::DType::f32, {}};
      for (float v : a.floats()) c.values.push_back(v);
      return c;
    }
  }
  return fail("a Constant without a value, value_float(s) or value_int(s) attribute");
}

Expected<Constant> reshape(const Constant& x, const Constant& target, bool allow_zero) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> shape, reshape_target(x.shape, target.integers(), allow_zero));
  return Constant{shape, x.dtype, x.values};
}

Expected<Constant> gather(const Constant& data, const Constant& indices, std::int64_t axis_attr) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t axis, normalize_axis(axis_attr, data.shape.size(), "axis"));
  const auto a = static_cast<std::size_t>(axis);
  std::vector<std::int64_t> shape(data.shape.begin(), data.shape.begin() + axis);
  shape.insert(shape.end(), indices.shape.begin(), indices.shape.end());
  shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
  const std::int64_t outer = numel({data.shape.begin(), data.shape.begin() + axis});
  const std::int64_t inner = numel({data.shape.begin() + axis + 1, data.shape.end()});
  const std::int64_t dim = data.shape[a];
  Constant out{shape, data.dtype, {}};
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < indices.values.size(); ++i) {
      std::int64_t at = indices.integer(i);
      if (at < 0) at += dim;
      if (at < 0 || at >= dim) return fail(fmt::format("index {} is out of range for a dim of {}", indices.integer(i), dim));
      for (std::int64_t in = 0; in < inner; ++in)
        out.values.push_back(data.values[static_cast<std::size_t>((o * dim + at) * inner + in)]);
    }
  return out;
}

Expected<Constant> slice(const NodeCall& call, const Constant& x) {
  LOOM_ASSIGN_OR_RETURN(std::vector<SliceRange> ranges, slice_ranges(call, x.shape));
  // Per dim the kept indices, then every combination of them in row-major order.
  std::vector<std::vector<std::int64_t>> kept(x.shape.size());
  for (std::size_t k = 0; k < x.shape.size(); ++k)
    for (std::int64_t i = 0; i < x.shape[k]; ++i) kept[k].push_back(i);
  for (const SliceRange& r : ranges) {
    std::vector<std::int64_t>& ks = kept[static_cast<std::size_t>(r.axis)];
    ks.clear();
    for (std::int64_t i = r.start; r.step > 0 ? i < r.end : i > r.end; i += r.step) ks.push_back(i);
  }
  Constant out{{}, x.dtype, {}};
  for (const auto& ks : kept) out.shape.push_back(static_cast<std::int64_t>(ks.size()));
  const std::vector<std::int64_t> in_strides = strides(x.shape);
  const std::int64_t n = numel(out.shape);
  const std::vector<std::int64_t> out_strides = strides(out.shape);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t at = 0;
    for (std::size_t k = 0; k < kept.size(); ++k)
      at += kept[k][static_cast<std::size_t>((i / out_strides[k]) % out.shape[k])] * in_strides[k];
    out.values.push_back(x.values[static_cast<std::size_t>(at)]);
  }
  return out;
}

Expected<Constant> concat(const NodeCall& call, const std::vector<const Constant*>& parts) {
  if (parts.empty()) return fail("a Concat without inputs");
  LOOM_ASSIGN_OR_RETURN(std::int64_t axis, normalize_axis(attr_int(call.node, "axis", 0), parts[0]->shape.size(), "axis"));
  const auto a = static_cast<std::size_t>(axis);
  Constant out{parts[0]->shape, parts[0]->dtype, {}};
  out.shape[a] = 0;
  for (const Constant* p : parts) out.shape[a] += p->shape[a];
  const std::int64_t outer = numel({out.shape.begin(), out.shape.begin() + axis});
  for (std::int64_t o = 0; o < outer; ++o)
    for (const Constant* p : parts) {
      const std::int64_t block = numel({p->shape.begin() + axis, p->shape.end()});
      out.values.insert(out.values.end(), p->values.begin() + o * block, p->values.begin() + (o + 1) * block);
    }
  return out;
}

Expected<Constant> unsqueeze(const NodeCall& call, const Constant& x) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> axes, axes_of(call));
  const std::size_t rank = x.shape.size() + axes.size();
  for (std::int64_t& a : axes) {
    LOOM_ASSIGN_OR_RETURN(a, normalize_axis(a, rank, "axis"));
  }
  std::sort(axes.begin(), axes.end());
  Constant out = x;
  for (std::int64_t a : axes) out.shape.insert(out.shape.begin() + a, 1);
  return out;
}

Expected<Constant> squeeze(const NodeCall& call, const Constant& x) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> axes, axes_of(call));
  Constant out = x;
  out.shape.clear();
  for (std::size_t k = 0; k < x.shape.size(); ++k) {
    const bool named = std::ranges::any_of(axes, [&](std::int64_t a) {
      return a == static_cast<std::int64_t>(k) || a + static_cast<std::int64_t>(x.shape.size()) == static_cast<std::int64_t>(k);
    });
    if (axes.empty() ? x.shape[k] != 1 : !named) out.shape.push_back(x.shape[k]);
  }
  return out;
}

Expected<Constant> transpose(const NodeCall& call, const Constant& x) {
  std::vector<std::int64_t> perm = attr_ints(call.node, "perm").value_or(std::vector<std::int64_t>{});
  if (perm.empty())
    for (std::size_t k = x.shape.size(); k-- > 0;) perm.push_back(static_cast<std::int64_t>(k));
  std::vector<std::int64_t> sorted = perm;
  std::ranges::sort(sorted);
  for (std::size_t k = 0; k < sorted.size(); ++k)
    if (sorted.size() != x.shape.size() || sorted[k] != static_cast<std::int64_t>(k))
      return fail(fmt::format("Transpose perm [{}] is not a permutation of the {} dims", fmt::join(perm, ", "),
                              x.shape.size()));
  Constant out{{}, x.dtype, {}};
  for (std::int64_t p : perm) out.shape.push_back(x.shape[static_cast<std::size_t>(p)]);
  const std::vector<std::int64_t> in_strides = strides(x.shape), out_strides = strides(out.shape);
  for (std::int64_t i = 0; i < numel(out.shape); ++i) {
    std::int64_t at = 0;
    for (std::size_t k = 0; k < perm.size(); ++k)
      at += ((i / out_strides[k]) % out.shape[k]) * in_strides[static_cast<std::size_t>(perm[k])];
    out.values.push_back(x.values[static_cast<std::size_t>(at)]);
  }
  return out;
}

Expected<Constant> range(const Constant& start, const Constant& limit, const Constant& delta) {
  const double s = start.values.at(0), l = limit.values.at(0), d = delta.values.at(0);
  if (d == 0) return fail("a Range with delta 0");
  const auto n = static_cast<std::int64_t>(std::max(0.0, std::ceil((l - s) / d)));
  if (n > ir::kMaxElements) return fail("a Range too large");
  Constant out{{n}, start.dtype, {}};
  for (std::int64_t i = 0; i < n; ++i) out.values.push_back(s + static_cast<double>(i) * d);
  return out;
}

Expected<Constant> fold_one(const NodeCall& call, const std::vector<const Constant*>& in) {
  const std::string& op = call.node.op_type();
  const onnx::NodeProto& n = call.node;
  if (op == "Constant") return constant_node(call);
  if (op == "Cast") {
    LOOM_ASSIGN_OR_RETURN(ir::DType to, dtype_of(static_cast<std::int32_t>(attr_int(n, "to", 1))));
    return elementwise({in[0]}, to, [to](const std::vector<double>& x) { return to_dtype(x[0], to); });
  }
  if (op == "ConstantOfShape") {
    Constant fill{{}, ir::DType::f32, {0.0}};
    if (const onnx::TensorProto* t = attr_tensor(n, "value")) {
      LOOM_ASSIGN_OR_RETURN(fill, constant_of(*t));
    }
    const std::vector<std::int64_t> shape = in[0]->integers();
    return Constant{shape, fill.dtype, std::vector<double>(static_cast<std::size_t>(numel(shape)), fill.values.at(0))};
  }
  if (op == "Reshape") return reshape(*in[0], *in[1], attr_int(n, "allowzero", 0) != 0);
  if (op == "Flatten") {
    LOOM_ASSIGN_OR_RETURN(std::int64_t axis, normalize_axis(attr_int(n, "axis", 1), in[0]->shape.size() + 1, "axis"));
    const std::int64_t rows = numel({in[0]->shape.begin(), in[0]->shape.begin() + axis});
    return Constant{{rows, numel(in[0]->shape) / std::max<std::int64_t>(rows, 1)}, in[0]->dtype, in[0]->values};
  }
  if (op == "Gather") return gather(*in[0], *in[1], attr_int(n, "axis", 0));
  if (op == "Slice") return slice(call, *in[0]);
  if (op == "Concat") return concat(call, in);
  if (op == "Unsqueeze") return unsqueeze(call, *in[0]);
  if (op == "Squeeze") return squeeze(call, *in[0]);
  if (op == "Transpose") return transpose(call, *in[0]);
  if (op == "Range") return range(*in[0], *in[1], *in[2]);
  if (op == "Expand") {
    const std::vector<std::vector<std::int64_t>> shapes = {in[0]->shape, in[1]->integers()};
    LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> shape, broadcast_shapes(shapes));
    Constant out{shape, in[0]->dtype, {}};
    for (std::int64_t i = 0; i < numel(shape); ++i) out.values.push_back(broadcast_at(*in[0], shape, i));
    return out;
  }
  if (op == "Where")
    return elementwise({in[0], in[1], in[2]}, in[1]->dtype,
                       [](const std::vector<double>& x) { return x[0] != 0 ? x[1] : x[2]; });
  if (in.size() == 1) return unary(call, *in[0]);
  return binary(call, *in[0], *in[1]);
}

const std::map<std::string_view, std::size_t>& foldable_arity() {
  // The ops folded on constants, with how many inputs each needs present.
  static const std::map<std::string_view, std::size_t> table = {
      {"Constant", 0}, {"Shape", 1}, {"ConstantOfShape", 1}, {"Cast", 1}, {"Identity", 1}, {"Reshape", 2},
      {"Flatten", 1}, {"Gather", 2}, {"Slice", 3}, {"Concat", 1}, {"Unsqueeze", 1}, {"Squeeze", 1},
      {"Transpose", 1}, {"Range", 3}, {"Expand", 2}, {"Where", 3}, {"Equal", 2}, {"Less", 2}, {"Greater", 2},
      {"LessOrEqual", 2}, {"GreaterOrEqual", 2}, {"And", 2}, {"Or", 2}, {"Not", 1}, {"Add", 2}, {"Sub", 2},
      {"Mul", 2}, {"Div", 2}, {"Pow", 2}, {"Max", 2}, {"Min", 2}, {"Sqrt", 1}, {"Neg", 1}, {"Reciprocal", 1}};
  return table;
}

}  // namespace

bool is_foldable(std::string_view op_type) { return foldable_arity().contains(op_type); }

Expected<Folded> fold(const Reader& reader, const NodeCall& call) {
  const auto it = foldable_arity().find(call.node.op_type());
  if (it == foldable_arity().end() || call.inputs.size() < it->second) return Folded{};
  if (call.node.op_type() == "Shape") {  // static shapes: the shape of any tensor is known now
    const Value* x = call.input(0);
    if (x == nullptr) return Folded{};
    std::vector<std::int64_t> shape = reader.dims(*x);
    const auto rank = static_cast<std::int64_t>(shape.size());
    const auto bound = [rank](std::int64_t i) { return std::clamp<std::int64_t>(i < 0 ? i + rank : i, 0, rank); };
    const std::int64_t start = bound(attr_int(call.node, "start", 0));
    const std::int64_t end = bound(attr_int(call.node, "end", rank));
    shape = std::vector<std::int64_t>(shape.begin() + start, shape.begin() + std::max(start, end));
    return Folded{std::vector<Constant>{integer_constant({static_cast<std::int64_t>(shape.size())}, shape)}};
  }
  std::vector<const Constant*> in;
  for (std::size_t k = 0; k < call.inputs.size(); ++k) {
    const Value* v = call.inputs[k];
    if (v == nullptr) {
      if (k < it->second) return Folded{};
      in.push_back(nullptr);
      continue;
    }
    if (!v->constant) return Folded{};
    in.push_back(&*v->constant);
  }
  // Optional inputs the folds read through NodeCall (Slice's axes, Unsqueeze's axes) are not elements.
  while (!in.empty() && in.back() == nullptr) in.pop_back();
  LOOM_ASSIGN_OR_RETURN(Constant out, fold_one(call, in));
  return Folded{std::vector<Constant>{std::move(out)}};
}

}  // namespace loom::frontend::onnx_reader
