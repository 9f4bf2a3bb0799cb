// The ONNX reader's values: element types, constants from TensorProtos, node attributes, and the Reader's
// bridge from ONNX values to Graph tensors.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "loom/core/checked_math.h"
#include "onnx_reader.h"

namespace loom::frontend::onnx_reader {

std::int64_t Constant::integer(std::size_t i) const {
  const double v = values[i];
  if (v >= 9.2e18) return std::numeric_limits<std::int64_t>::max();
  // NaN (a float constant used as an index or size) reads as -inf does: out of range wherever it is checked,
  // never converted (NaN to an integer is undefined behaviour).
  if (std::isnan(v) || v <= -9.2e18) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(v);
}

std::vector<std::int64_t> Constant::integers() const {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < values.size(); ++i) out.push_back(integer(i));
  return out;
}

Expected<ir::DType> dtype_of(std::int32_t onnx_type) {
  using T = onnx::TensorProto;
  switch (onnx_type) {
    case T::FLOAT: return ir::DType::f32;
    case T::DOUBLE: return ir::DType::f64;
    case T::FLOAT16: return ir::DType::f16;
    case T::BFLOAT16: return ir::DType::bf16;
    case T::INT64: return ir::DType::i64;
    case T::INT32: return ir::DType::i32;
    case T::INT8: return ir::DType::i8;
    case T::UINT8: return ir::DType::u8;
    case T::BOOL: return ir::DType::boolean;
    default:
      return fail(fmt::format("element type {} ({}) has no engine dtype", onnx_type,
                              T::DataType_IsValid(onnx_type) ? T::DataType_Name(static_cast<T::DataType>(onnx_type))
                                                             : std::string("unknown")),
                  "export the model in float32 (or float16 / bfloat16) with int64 ids");
  }
}

namespace {

template <class T>
void append_raw(const std::string& raw, std::vector<double>& out) {
  for (std::size_t at = 0; at + sizeof(T) <= raw.size(); at += sizeof(T)) {
    T v;
    std::memcpy(&v, raw.data() + at, sizeof(T));
    out.push_back(static_cast<double>(v));
  }
}

}  // namespace

Expected<Constant> constant_of(const onnx::TensorProto& proto) {
  using T = onnx::TensorProto;
  Constant c;
  LOOM_ASSIGN_OR_RETURN(c.dtype, with_context(dtype_of(proto.data_type()), fmt::format("tensor '{}'", proto.name())));
  std::int64_t count = 1;
  for (std::int64_t d : proto.dims()) {
    if (d < 0 || d > ir::kMaxElements) return fail(fmt::format("tensor '{}' has a bad dim {}", proto.name(), d));
    c.shape.push_back(d);
    count *= d;
    if (count > ir::kMaxElements) return fail(fmt::format("tensor '{}' is too large", proto.name()));
  }
  if (proto.data_location() == T::EXTERNAL)
    return fail(fmt::format("tensor '{}' keeps its elements in an external file", proto.name()),
                "export with external_data=False (the constants the reader folds must be in the model file)");
  const std::string& raw = proto.raw_data();
  if (!raw.empty()) {
    switch (proto.data_type()) {
      case T::FLOAT: append_raw<float>(raw, c.values); break;
      case T::DOUBLE: append_raw<double>(raw, c.values); break;
      case T::INT64: append_raw<std::int64_t>(raw, c.values); break;
      case T::INT32: append_raw<std::int32_t>(raw, c.values); break;
      case T::INT8: append_raw<std::int8_t>(raw, c.values); break;
      case T::UINT8:
      case T::BOOL: append_raw<std::uint8_t>(raw, c.values); break;
      default:
        return fail(fmt::format("tensor '{}': raw {} elements are not read", proto.name(), ir::name(c.dtype)),
                    "export its constants in float32 or an integer type");
    }
  } else {
    for (float v : proto.float_data()) c.values.push_back(v);
    for (double v : proto.double_data()) c.values.push_back(v);
    for (std::int64_t v : proto.int64_data()) c.values.push_back(static_cast<double>(v));
    if (proto.data_type() != T::FLOAT16 && proto.data_type() != T::BFLOAT16)
      for (std::int32_t v : proto.int32_data()) c.values.push_back(v);
  }
  if (static_cast<std::int64_t>(c.values.size()) != count)
    return fail(fmt::format("tensor '{}' of shape [{}] holds {} elements, not {}", proto.name(),
                            fmt::join(c.shape, ", "), c.values.size(), count),
                "the file is damaged or truncated: export it again");
  return c;
}

Expected<const Constant*> NodeCall::constant_input(std::size_t i, std::string_view what) const {
  const Value* v = input(i);
  if (v == nullptr || !v->constant)
    return fail(fmt::format("its {} (input {}) must be a constant, not a computed tensor", what, i),
                "export with static shapes (fixed batch and sequence), so shapes and axes are constants");
  return &*v->constant;
}

ir::TensorId Reader::tensor(Value& value, const std::string& name) {
  if (value.tensor.valid()) return value.tensor;
  if (value.parameter) {
    value.tensor = builder.parameter(value.parameter->name, value.parameter->shape, value.parameter->dtype);
    return value.tensor;
  }
  if (!value.constant) return value.tensor;
  const Constant& c = *value.constant;
  value.tensor = builder.buffer(name, ir::Shape(c.shape), c.dtype);
  if (value.tensor.valid()) buffer_values.emplace_back(value.tensor, c.values);
  return value.tensor;
}

std::vector<std::int64_t> Reader::dims(const Value& value) const {
  if (value.constant) return value.constant->shape;
  if (value.parameter) return value.parameter->shape.dims;
  return builder.shape(value.tensor).dims;
}

ir::DType Reader::dtype(const Value& value) const {
  if (value.constant) return value.constant->dtype;
  if (value.parameter) return value.parameter->dtype;
  return builder.dtype(value.tensor);
}

Value Reader::emit(const std::string& type, const std::string& name, const std::vector<ir::TensorId>& inputs,
                   ir::Attrs attrs) {
  return Value{builder.op(type, name, inputs, std::move(attrs)), {}, {}};
}

std::vector<Value> Reader::emit_all(const std::string& type, const std::string& name,
                                    const std::vector<ir::TensorId>& inputs, ir::Attrs attrs) {
  std::vector<Value> out;
  for (ir::TensorId id : builder.ops(type, name, inputs, std::move(attrs))) out.push_back(Value{id, {}, {}});
  return out;
}

namespace {

const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, std::string_view name) {
  for (const onnx::AttributeProto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

}  // namespace

std::int64_t attr_int(const onnx::NodeProto& node, std::string_view name, std::int64_t fallback) {
  const onnx::AttributeProto* a = find_attr(node, name);
  return a != nullptr ? a->i() : fallback;
}

double attr_float(const onnx::NodeProto& node, std::string_view name, double fallback) {
  const onnx::AttributeProto* a = find_attr(node, name);
  return a != nullptr ? a->f() : fallback;
}

std::optional<std::vector<std::int64_t>> attr_ints(const onnx::NodeProto& node, std::string_view name) {
  const onnx::AttributeProto* a = find_attr(node, name);
  if (a == nullptr) return std::nullopt;
  return std::vector<std::int64_t>(a->ints().begin(), a->ints().end());
}

std::string attr_string(const onnx::NodeProto& node, std::string_view name, std::string fallback) {
  const onnx::AttributeProto* a = find_attr(node, name);
  return a != nullptr ? a->s() : fallback;
}

const onnx::TensorProto* attr_tensor(const onnx::NodeProto& node, std::string_view name) {
  const onnx::AttributeProto* a = find_attr(node, name);
  return a != nullptr && a->has_t() ? &a->t() : nullptr;
}

Expected<std::int64_t> normalize_axis(std::int64_t axis, std::size_t rank, std::string_view what) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r) return fail(fmt::format("{} {} is out of range for rank {}", what, axis, rank));
  return axis < 0 ? axis + r : axis;
}

Expected<std::vector<std::int64_t>> broadcast_shapes(std::span<const std::vector<std::int64_t>> shapes) {
  std::size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<std::int64_t> out(rank, 1);
  for (const auto& s : shapes)
    for (std::size_t k = 0; k < s.size(); ++k) {
      std::int64_t& o = out[rank - s.size() + k];
      if (s[k] == o || s[k] == 1) continue;
      if (o != 1) {
        std::vector<std::string> texts;
        for (const auto& t : shapes) texts.push_back(fmt::format("[{}]", fmt::join(t, ", ")));
        return fail(fmt::format("shapes {} do not broadcast", fmt::join(texts, " and ")));
      }
      o = s[k];
    }
  return out;
}

// The target of a Reshape with ONNX's 0 (keep the input's dim, unless allowzero) and -1 (the rest) resolved.
Expected<std::vector<std::int64_t>> reshape_target(const std::vector<std::int64_t>& in,
                                                   std::vector<std::int64_t> shape, bool allow_zero) {
  const auto too_large = [&] {
    return fail(fmt::format("cannot reshape [{}] to [{}]: more than 2^63 elements", fmt::join(in, ", "),
                            fmt::join(shape, ", ")));
  };
  std::int64_t known = 1, total = 1;
  for (std::int64_t d : in) {
    const std::optional<std::int64_t> next = checked_mul(total, d);
    if (!next) return too_large();
    total = *next;
  }
  int unknown = -1;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0 && !allow_zero && k < in.size()) shape[k] = in[k];
    if (shape[k] < -1)
      return fail(fmt::format("a Reshape target dim of {} in [{}]", shape[k], fmt::join(shape, ", ")));
    if (shape[k] == -1) {
      if (unknown >= 0) return fail("a Reshape target with two -1 dims");
      unknown = static_cast<int>(k);
    } else {
      const std::optional<std::int64_t> next = checked_mul(known, shape[k]);  // checked: the sizes are the file's
      if (!next) return too_large();
      known = *next;
    }
  }
  if (unknown >= 0 && known > 0) shape[static_cast<std::size_t>(unknown)] = total / known;
  std::int64_t count = 1;
  for (std::int64_t d : shape) {
    const std::optional<std::int64_t> next = checked_mul(count, d);
    if (!next) return too_large();
    count = *next;
  }
  if (count != total)
    return fail(fmt::format("cannot reshape [{}] to [{}]", fmt::join(in, ", "), fmt::join(shape, ", ")));
  return shape;
}

Expected<std::vector<std::int64_t>> axes_of(const NodeCall& call) {
  if (call.input(1) != nullptr) {
    LOOM_ASSIGN_OR_RETURN(const Constant* axes, call.constant_input(1, "axes"));
    return axes->integers();
  }
  return attr_ints(call.node, "axes").value_or(std::vector<std::int64_t>{});
}

Expected<std::vector<SliceRange>> slice_ranges(const NodeCall& call, const std::vector<std::int64_t>& shape) {
  LOOM_ASSIGN_OR_RETURN(const Constant* starts, call.constant_input(1, "starts"));
  LOOM_ASSIGN_OR_RETURN(const Constant* ends, call.constant_input(2, "ends"));
  std::vector<std::int64_t> axes, steps;
  if (call.input(3) != nullptr) {
    LOOM_ASSIGN_OR_RETURN(const Constant* a, call.constant_input(3, "axes"));
    axes = a->integers();
  } else {
    for (std::size_t k = 0; k < starts->values.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  }
  if (call.input(4) != nullptr) {
    LOOM_ASSIGN_OR_RETURN(const Constant* s, call.constant_input(4, "steps"));
    steps = s->integers();
  } else {
    steps.assign(axes.size(), 1);
  }
  if (starts->values.size() != axes.size() || ends->values.size() != axes.size() || steps.size() != axes.size())
    return fail("starts, ends, axes and steps differ in length");
  std::vector<SliceRange> out;
  for (std::size_t k = 0; k < axes.size(); ++k) {
    SliceRange r;
    LOOM_ASSIGN_OR_RETURN(r.axis, normalize_axis(axes[k], shape.size(), "axis"));
    r.step = steps[k];
    if (r.step == 0) return fail("a step of 0");
    const std::int64_t dim = shape[static_cast<std::size_t>(r.axis)];
    const auto clamp_index = [&](std::int64_t i) {
      if (i < 0) i = i < -dim ? -1 : i + dim;  // saturate before adding, so INT64_MIN cannot overflow
      return r.step > 0 ? std::clamp<std::int64_t>(i, 0, dim) : std::clamp<std::int64_t>(i, -1, dim - 1);
    };
    r.start = clamp_index(starts->integer(k));
    if (r.step > 0 && r.start < 0) r.start = 0;
    r.end = clamp_index(ends->integer(k));
    out.push_back(r);
  }
  return out;
}

}  // namespace loom::frontend::onnx_reader
