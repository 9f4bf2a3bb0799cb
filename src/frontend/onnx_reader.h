// The ONNX reader's working state (frontend/onnx_file.h), shared by its files: what each ONNX value name
// stands for while the nodes are read in order, the builder of the forward Graph, and the per-op mappings.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/graph_builder.h"

namespace loom::frontend::onnx_reader {

// A tensor whose elements the file fixes: a Constant node, an integer initializer, or a folded computation
// on those (a shape, a causal mask). Elements row-major as doubles: integers are exact up to 2^53, larger
// ones (INT64_MAX as "to the end" in Slice) clamp when read back as integers.
struct Constant {
  std::vector<std::int64_t> shape;
  ir::DType dtype = ir::DType::f32;
  std::vector<double> values;

  std::int64_t integer(std::size_t i) const;
  std::vector<std::int64_t> integers() const;
};

// A floating initializer: a parameter, added to the Graph when an op first reads it (so an initializer
// that only the exporter's Identity dedup reads is not counted).
struct Parameter {
  std::string name;
  ir::Shape shape;
  ir::DType dtype = ir::DType::f32;
};

// What an ONNX value name stands for: a Graph tensor, a parameter, or a constant that enters the Graph
// (as a buffer holding its elements) only when an op reads it as a tensor.
struct Value {
  ir::TensorId tensor;
  std::optional<Constant> constant;
  std::optional<Parameter> parameter;
};

Expected<ir::DType> dtype_of(std::int32_t onnx_type);
Expected<Constant> constant_of(const onnx::TensorProto& proto);

// One node being read: its op name (the node name as a module path) and its inputs (nullptr: an
// optional input left out).
struct NodeCall {
  const onnx::NodeProto& node;
  std::string name;
  std::vector<Value*> inputs;

  Value* input(std::size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  // The i-th input's elements, which this op needs fixed (an axes or shape operand); the error names it.
  Expected<const Constant*> constant_input(std::size_t i, std::string_view what) const;
};

class Reader {
 public:
  Reader(std::string graph_name, const ir::OpCatalog& catalog) : builder(std::move(graph_name), catalog) {}

  // The Graph tensor of `value`; a parameter or a constant (a buffer named `name`) enters the Graph the first time.
  ir::TensorId tensor(Value& value, const std::string& name);
  std::vector<std::int64_t> dims(const Value& value) const;
  ir::DType dtype(const Value& value) const;
  // Appends a registry op; its error (if any) is the builder's.
  Value emit(const std::string& type, const std::string& name, const std::vector<ir::TensorId>& inputs,
             ir::Attrs attrs = {});
  std::vector<Value> emit_all(const std::string& type, const std::string& name,
                              const std::vector<ir::TensorId>& inputs, ir::Attrs attrs = {});

  ir::GraphBuilder builder;
  // The elements of the buffers made from constants, set on the finished Graph.
  std::vector<std::pair<ir::TensorId, std::vector<double>>> buffer_values;
};

// Attributes of a node, with the ONNX default when absent.
std::int64_t attr_int(const onnx::NodeProto& node, std::string_view name, std::int64_t fallback);
double attr_float(const onnx::NodeProto& node, std::string_view name, double fallback);
std::optional<std::vector<std::int64_t>> attr_ints(const onnx::NodeProto& node, std::string_view name);
std::string attr_string(const onnx::NodeProto& node, std::string_view name, std::string fallback);
const onnx::TensorProto* attr_tensor(const onnx::NodeProto& node, std::string_view name);

// A dim index of an ONNX attribute (negative counts from the end) checked against `rank`.
Expected<std::int64_t> normalize_axis(std::int64_t axis, std::size_t rank, std::string_view what);
// numpy broadcasting of shapes; the error names both.
Expected<std::vector<std::int64_t>> broadcast_shapes(std::span<const std::vector<std::int64_t>> shapes);

// A Reshape's target with ONNX's 0 (keep the input's dim, unless allow_zero) and -1 (the rest) resolved.
Expected<std::vector<std::int64_t>> reshape_target(const std::vector<std::int64_t>& in,
                                                   std::vector<std::int64_t> shape, bool allow_zero);
// The axes of Unsqueeze, Squeeze (input 1 from opset 13, an attribute before); empty when absent.
Expected<std::vector<std::int64_t>> axes_of(const NodeCall& call);

// Slice's per-axis range after ONNX's clamping rules: [start, end) by step along `axis`.
struct SliceRange {
  std::int64_t axis = 0, start = 0, end = 0, step = 1;
};
Expected<std::vector<SliceRange>> slice_ranges(const NodeCall& call, const std::vector<std::int64_t>& shape);

// Maps a node with at least one Graph-tensor input onto registry ops (onnx_math_ops.cc, onnx_shape_ops.cc).
using Handler = Expected<std::vector<Value>> (*)(Reader&, const NodeCall&);
const Handler* find_handler(std::string_view op_type);
void add_math_handlers(std::vector<std::pair<std::string_view, Handler>>& table);
void add_shape_handlers(std::vector<std::pair<std::string_view, Handler>>& table);

// Constant folding (onnx_fold.cc): the outputs of a node all of whose inputs are constants (Shape: any
// input, shapes are static), or nullopt when the node is not folded.
bool is_foldable(std::string_view op_type);
Expected<std::optional<std::vector<Constant>>> fold(const Reader& reader, const NodeCall& call);

}  // namespace loom::frontend::onnx_reader
