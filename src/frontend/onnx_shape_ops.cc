// ONNX shape and indexing nodes (Reshape, Transpose, Split, Slice, Concat, Unsqueeze, Squeeze, Expand,
// Gather, Pad, Identity) as registry ops. Their shape operands must be constants: shapes are static.
#include <algorithm>

#include <fmt/format.h>

#include "onnx_reader.h"

namespace loom::frontend::onnx_reader {
namespace {

using Out = Expected<std::vector<Value>>;

std::vector<Value> one(Value v) { return {std::move(v)}; }

Expected<Value*> data_input(const NodeCall& call) {
  if (Value* v = call.input(0)) return v;
  return fail("input 0 is missing");
}

Out reshape(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * x, data_input(call));
  LOOM_ASSIGN_OR_RETURN(const Constant* target, call.constant_input(1, "shape"));
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> shape,
                        reshape_target(r.dims(*x), target->integers(), attr_int(call.node, "allowzero", 0) != 0));
  return one(r.emit("reshape", call.name, {r.tensor(*x, call.node.input(0))}, {{"shape", shape}}));
}

Out flatten(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * x, data_input(call));
  const std::vector<std::int64_t> in = r.dims(*x);
  LOOM_ASSIGN_OR_RETURN(std::int64_t axis, normalize_axis(attr_int(call.node, "axis", 1), in.size() + 1, "axis"));
  std::int64_t rows = 1, cols = 1;
  for (std::size_t k = 0; k < in.size(); ++k) (static_cast<std::int64_t>(k) < axis ? rows : cols) *= in[k];
  return one(r.emit("reshape", call.name, {r.tensor(*x, call.node.input(0))},
                    {{"shape", std::vector<std::int64_t>{rows, cols}}}));
}

Out transpose(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * x, data_input(call));
  std::vector<std::int64_t> perm = attr_ints(call.node, "perm").value_or(std::vector<std::int64_t>{});
  if (perm.empty())
    for (std::size_t k = r.dims(*x).size(); k-- > 0;) perm.push_back(static_cast<std::int64_t>(k));
  return one(r.emit("permute", call.name, {r.tensor(*x, call.node.input(0))}, {{"dims", perm}}));
}

Out split(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * x, data_input(call));
  const std::vector<std::int64_t> in = r.dims(*x);
  LOOM_ASSIGN_OR_RETURN(std::int64_t axis, normalize_axis(attr_int(call.node, "axis", 0), in.size(), "axis"));
  std::vector<std::int64_t> sizes = attr_ints(call.node, "split").value_or(std::vector<std::int64_t>{});
  if (call.input(1) != nullptr) {
    LOOM_ASSIGN_OR_RETURN(const Constant* given, call.constant_input(1, "split"));
    sizes = given->integers();
  }
  if (sizes.empty()) {  // equal parts, one per output (the last smaller when the dim does not divide)
    const auto parts = static_cast<std::int64_t>(call.node.output_size());
    const std::int64_t dim = in[static_cast<std::size_t>(axis)];
    const std::int64_t each = (dim + parts - 1) / parts;
    for (std::int64_t at = 0; at < dim; at += each) sizes.push_back(std::min(each, dim - at));
  }
  return r.emit_all("split", call.name, {r.tensor(*x, call.node.input(0))}, {{"sizes", sizes}, {"dim", axis}});
}

// One slice op per sliced dim (the registry's slice cuts one dim); dims kept whole need none.
Out slice(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * x, data_input(call));
  const std::vector<std::int64_t> in = r.dims(*x);
  LOOM_ASSIGN_OR_RETURN(std::vector<SliceRange> ranges, slice_ranges(call, in));
  std::erase_if(ranges, [&](const SliceRange& s) {
    return s.step == 1 && s.start == 0 && s.end == in[static_cast<std::size_t>(s.axis)];
  });
  Value out = *x;
  out.tensor = r.tensor(*x, call.node.input(0));
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    const SliceRange& s = ranges[k];
    if (s.step < 0) return fail("a Slice with a negative step is not mapped", "flip the tensor outside the model");
    const std::string name = k + 1 == ranges.size() ? call.name : fmt::format("{}.dim{}", call.name, s.axis);
    out = r.emit("slice", name, {out.tensor},
                 {{"dim", s.axis}, {"start", s.start}, {"end", std::max(s.start, s.end)}, {"step", s.step}});
  }
  out.constant.reset();
  out.parameter.reset();
  return one(out);
}

Out concat(Reader& r, const NodeCall& call) {
  std::vector<ir::TensorId> inputs;
  for (std::size_t k = 0; k < call.inputs.size(); ++k)
    if (Value* v = call.input(k)) inputs.push_back(r.tensor(*v, call.node.input(static_cast<int>(k))));
  return one(r.emit("concat", call.name, inputs, {{"dim", attr_int(call.node, "axis", 0)}}));
}

// One `type` op per dim in `dims` order, the last named after the node.
Value chain(Reader& r, const NodeCall& call, const std::string& type, ir::TensorId in,
            const std::vector<std::int64_t>& dims) {
  Value out{in, {}, {}};
  for (std::size_t k = 0; k < dims.size(); ++k)
    out = r.emit(type, k + 1 == dims.size() ? call.name : fmt::format("{}.{}", call.name, k), {out.tensor},
                 {{"dim", dims[k]}});
  return out;
}

// One unsqueeze op per new dim, in increasing order (each axis names a dim of the output).
Out unsqueeze(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * x, data_input(call));
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> axes, axes_of(call));
  const std::size_t rank = r.dims(*x).size() + axes.size();
  for (std::int64_t& a : axes) {
    LOOM_ASSIGN_OR_RETURN(a, normalize_axis(a, rank, "axis"));
  }
  std::ranges::sort(axes);
  return one(chain(r, call, "unsqueeze", r.tensor(*x, call.node.input(0)), axes));
}

// One squeeze op per removed dim, the last first so the others keep their index; no axes: every size-1 dim.
Out squeeze(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * x, data_input(call));
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> axes, axes_of(call));
  const ir::TensorId in = r.tensor(*x, call.node.input(0));
  if (axes.empty()) return one(r.emit("squeeze", call.name, {in}));
  const std::size_t rank = r.dims(*x).size();
  for (std::int64_t& a : axes) {
    LOOM_ASSIGN_OR_RETURN(a, normalize_axis(a, rank, "axis"));
  }
  std::ranges::sort(axes, std::greater<>());
  return one(chain(r, call, "squeeze", in, axes));
}

Out expand(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * x, data_input(call));
  LOOM_ASSIGN_OR_RETURN(const Constant* target, call.constant_input(1, "shape"));
  const std::vector<std::vector<std::int64_t>> shapes = {r.dims(*x), target->integers()};
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> shape, broadcast_shapes(shapes));
  const ir::TensorId in = r.tensor(*x, call.node.input(0));
  if (shape == r.dims(*x)) return one(Value{in, {}, {}});
  return one(r.emit("expand", call.name, {in}, {{"shape", shape}}));
}

// Gather of a weight's rows by integer ids is an embedding; by one constant index a slice and a squeeze;
// by a 1-D constant index an index_select.
Out gather(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * data, data_input(call));
  Value* indices = call.input(1);
  if (indices == nullptr) return fail("input 1 (indices) is missing");
  const std::vector<std::int64_t> in = r.dims(*data);
  LOOM_ASSIGN_OR_RETURN(std::int64_t axis, normalize_axis(attr_int(call.node, "axis", 0), in.size(), "axis"));
  const ir::TensorId x = r.tensor(*data, call.node.input(0));
  if (axis == 0 && in.size() == 2 && (data->parameter || !indices->constant || indices->constant->shape.size() > 1))
    return one(r.emit("embedding", call.name, {r.tensor(*indices, call.node.input(1)), x}));
  if (!indices->constant)
    return fail("a Gather of a computed tensor by computed indices is not mapped",
                "gather rows of a 2-D weight (an embedding), or index with constants");
  const Constant& idx = *indices->constant;
  if (idx.shape.empty()) {
    std::int64_t at = idx.integer(0);
    if (at < 0) at += in[static_cast<std::size_t>(axis)];
    const Value picked = r.emit("slice", call.name + ".pick", {x}, {{"dim", axis}, {"start", at}, {"end", at + 1}});
    return one(r.emit("squeeze", call.name, {picked.tensor}, {{"dim", axis}}));
  }
  if (idx.shape.size() == 1)
    return one(r.emit("index_select", call.name, {x, r.tensor(*indices, call.node.input(1))}, {{"dim", axis}}));
  return fail("a Gather by a constant index of rank > 1 from a tensor that is not a 2-D weight is not mapped");
}

// Pad in mode "constant" (F.pad's; transformers 5 pads a causal LM's labels with -100 before its shift).
// ONNX lists every padded axis's begin, then every end; the registry's pad takes (before, after) pairs,
// last dim first.
Out pad(Reader& r, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * x, data_input(call));
  const std::string mode = attr_string(call.node, "mode", "constant");
  if (mode != "constant")
    return fail(fmt::format("a Pad in mode '{}' is not mapped", mode), "pad with a constant (F.pad's default mode)");
  const std::vector<std::int64_t> in = r.dims(*x);
  LOOM_ASSIGN_OR_RETURN(const Constant* given, call.constant_input(1, "pads"));
  const std::vector<std::int64_t> pads = given->integers();
  std::vector<std::int64_t> axes;
  if (call.input(3) != nullptr) {  // opset 18: the axes the pads are for
    LOOM_ASSIGN_OR_RETURN(const Constant* listed, call.constant_input(3, "axes"));
    for (std::int64_t a : listed->integers()) {
      LOOM_ASSIGN_OR_RETURN(axes.emplace_back(), normalize_axis(a, in.size(), "axis"));
    }
  } else {
    for (std::size_t a = 0; a < in.size(); ++a) axes.push_back(static_cast<std::int64_t>(a));
  }
  if (pads.size() != 2 * axes.size())
    return fail(fmt::format("its pads have {} values for {} axes", pads.size(), axes.size()),
                "give a begin and an end for every padded axis");
  std::vector<std::int64_t> pairs(2 * in.size(), 0);
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const std::size_t pair = in.size() - 1 - static_cast<std::size_t>(axes[k]);
    pairs[2 * pair] = pads[k];
    pairs[2 * pair + 1] = pads[k + axes.size()];
  }
  double value = 0.0;
  if (call.input(2) != nullptr) {
    LOOM_ASSIGN_OR_RETURN(const Constant* fill, call.constant_input(2, "constant_value"));
    if (!fill->values.empty()) value = fill->values.front();
  }
  return one(r.emit("pad", call.name, {r.tensor(*x, call.node.input(0))}, {{"pads", pairs}, {"value", value}}));
}

// Identity and inference-mode Dropout pass their input on; an Identity of a floating initializer is the
// exporter sharing equal initial values (torch.onnx dedups them), so its output is its own parameter.
Out identity(Reader&, const NodeCall& call) {
  LOOM_ASSIGN_OR_RETURN(Value * x, data_input(call));
  if (x->parameter) return one(Value{{}, {}, Parameter{call.node.output(0), x->parameter->shape, x->parameter->dtype}});
  if (call.node.op_type() == "Dropout" && call.node.output_size() > 1 && !call.node.output(1).empty())
    return fail("a Dropout whose mask is used is not mapped", "export in eval mode (model.eval())");
  return one(*x);
}

}  // namespace

void add_shape_handlers(std::vector<std::pair<std::string_view, Handler>>& t) {
  t.insert(t.end(), {{"Reshape", reshape}, {"Flatten", flatten}, {"Transpose", transpose}, {"Split", split},
                     {"Slice", slice}, {"Concat", concat}, {"Unsqueeze", unsqueeze}, {"Squeeze", squeeze},
                     {"Expand", expand}, {"Gather", gather}, {"Pad", pad}, {"Identity", identity}, {"Dropout", identity}});
}

}  // namespace loom::frontend::onnx_reader
