// The ONNX reader's entry points: parse the ModelProto, check its opset, list unknown ops together, then
// read the graph's inputs, initializers and nodes in order (onnx_reader.h) and take its output as the loss.
#include "loom/frontend/onnx_file.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/core/input_file.h"
#include "loom/ir/validate.h"
#include "onnx_reader.h"

namespace loom::frontend {

namespace {

// protobuf parses at most 2 GiB; larger models keep their weights in external data files.
constexpr std::uintmax_t kMaxOnnxBytes = std::uintmax_t{2} << 30;

using onnx_reader::Constant;
using onnx_reader::NodeCall;
using onnx_reader::Reader;
using onnx_reader::Value;

// The opsets whose semantics the mapping follows (Softmax over one axis, axes as inputs or attributes).
constexpr std::int64_t kMinOpset = 13;
constexpr std::int64_t kMaxOpset = 23;

// "/m/transformer/h.0/attn/MatMul" -> "m.transformer.h.0.attn.MatMul": the module path, as traced op names read.
std::string op_name(const onnx::NodeProto& node, int index) {
  if (node.name().empty()) return fmt::format("{}_{}", node.op_type(), index);
  std::string name = node.name();
  while (!name.empty() && name.front() == '/') name.erase(name.begin());
  std::ranges::replace(name, '/', '.');
  return name.empty() ? fmt::format("{}_{}", node.op_type(), index) : name;
}

bool default_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

Expected<void> check_opset(const onnx::ModelProto& model) {
  for (const onnx::OperatorSetIdProto& set : model.opset_import())
    if (default_domain(set.domain()) && (set.version() < kMinOpset || set.version() > kMaxOpset))
      return fail(fmt::format("opset {} is not understood (the reader maps opsets {} to {})", set.version(), kMinOpset,
                              kMaxOpset),
                  "export with opset_version=17 (torch.onnx.export(..., opset_version=17))");
  return {};
}

// Every node type the reader cannot map, with its count and one node, in one error.
Expected<void> check_known_ops(const onnx::GraphProto& graph) {
  struct Seen {
    int count = 0;
    std::string node;
  };
  std::map<std::string, Seen> unknown;
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto& n = graph.node(i);
    const bool known = default_domain(n.domain()) &&
                       (onnx_reader::find_handler(n.op_type()) != nullptr || onnx_reader::is_foldable(n.op_type()));
    if (known) continue;
    Seen& s = unknown[default_domain(n.domain()) ? n.op_type() : n.domain() + "::" + n.op_type()];
    if (s.count++ == 0) s.node = op_name(n, i);
  }
  if (unknown.empty()) return {};
  std::vector<std::string> lines;
  for (const auto& [type, s] : unknown) lines.push_back(fmt::format("{} x{} (e.g. node '{}')", type, s.count, s.node));
  return fail(fmt::format("{} ONNX op type(s) have no mapping onto the registry: {}", unknown.size(), join(lines, ", ")),
              "docs/onnx.md lists the mapped ops; export with ops that decompose into them, or register the "
              "missing ones as custom ops (loom.register_op, docs/custom_ops.md) and plan the traced graph; "
              "`loom ops` lists the known types");
}

Expected<ir::Shape> input_shape(const onnx::ValueInfoProto& input, const OnnxOptions& options) {
  if (!input.type().has_tensor_type() || !input.type().tensor_type().has_shape())
    return fail(fmt::format("input '{}' has no tensor shape", input.name()), "export with static input shapes");
  ir::Shape shape;
  const auto& dims = input.type().tensor_type().shape().dim();
  for (int k = 0; k < dims.size(); ++k) {
    const onnx::TensorShapeProto::Dimension& d = dims[k];
    if (d.has_dim_value() && d.dim_value() > 0) {
      shape.dims.push_back(d.dim_value());
      continue;
    }
    const std::string& symbol = d.has_dim_param() ? d.dim_param() : std::string();
    if (const auto it = options.dims.find(symbol); !symbol.empty() && it != options.dims.end()) {
      shape.dims.push_back(it->second);
      continue;
    }
    const std::string what = symbol.empty() ? "an unknown size" : fmt::format("the symbolic size '{}'", symbol);
    return fail(fmt::format("input '{}' has {} at dim {}", input.name(), what, k),
                symbol.empty() ? "export with static shapes (no dynamic_axes / dynamic_shapes)"
                               : fmt::format("give it a size with --onnx-dim {}=N, or export with static shapes (no "
                                             "dynamic_axes / dynamic_shapes)",
                                             symbol));
  }
  return shape;
}

// Reads the graph: values by name, the nodes in order (ONNX keeps them topologically sorted).
Expected<ir::Graph> read_graph(const onnx::ModelProto& model, const ir::OpCatalog& catalog,
                               const OnnxOptions& options) {
  const onnx::GraphProto& g = model.graph();
  Reader reader(g.name().empty() ? std::string("onnx") : g.name(), catalog);
  std::unordered_map<std::string, Value> values;
  for (const onnx::TensorProto& init : g.initializer()) {
    LOOM_ASSIGN_OR_RETURN(ir::DType dtype, with_context(onnx_reader::dtype_of(init.data_type()),
                                                        fmt::format("initializer '{}'", init.name())));
    if (ir::is_floating(dtype)) {
      values[init.name()] = Value{{}, {}, onnx_reader::Parameter{init.name(), ir::Shape({init.dims().begin(), init.dims().end()}), dtype}};
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(Constant c, onnx_reader::constant_of(init));
    values[init.name()] = Value{{}, std::move(c), {}};
  }
  for (const onnx::ValueInfoProto& input : g.input()) {
    if (values.contains(input.name())) continue;  // IR < 4 lists initializers among the inputs
    LOOM_ASSIGN_OR_RETURN(ir::Shape shape, input_shape(input, options));
    LOOM_ASSIGN_OR_RETURN(ir::DType dtype, with_context(onnx_reader::dtype_of(input.type().tensor_type().elem_type()),
                                                        fmt::format("input '{}'", input.name())));
    values[input.name()] = Value{reader.builder.input(input.name(), std::move(shape), dtype), {}, {}};
  }
  LOOM_RETURN_IF_ERROR(check_known_ops(g));
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    NodeCall call{n, op_name(n, i), {}};
    const std::string where = fmt::format("node '{}' ({})", call.name, n.op_type());
    for (const std::string& in : n.input()) {
      if (in.empty()) {
        call.inputs.push_back(nullptr);
        continue;
      }
      const auto it = values.find(in);
      if (it == values.end())
        return fail(fmt::format("{}: input '{}' is not produced before it", where, in),
                    "the file is damaged: export it again");
      call.inputs.push_back(&it->second);
    }
    std::vector<Value> outs;
    LOOM_ASSIGN_OR_RETURN(auto folded, with_context(onnx_reader::fold(reader, call), where));
    if (folded) {
      for (Constant& c : *folded) outs.push_back(Value{{}, std::move(c), {}});
    } else if (const onnx_reader::Handler* handler = onnx_reader::find_handler(n.op_type())) {
      LOOM_ASSIGN_OR_RETURN(outs, with_context((*handler)(reader, call), where));
    } else {
      return fail(fmt::format("{}: only constant inputs are mapped for this op", where),
                  "export with static shapes, so that it computes on constants only");
    }
    if (!reader.builder.ok()) return std::unexpected(with_context(std::move(reader.builder).finish().error(), where));
    for (std::size_t k = 0; k < outs.size() && k < static_cast<std::size_t>(n.output_size()); ++k)
      if (!n.output(static_cast<int>(k)).empty()) values[n.output(static_cast<int>(k))] = std::move(outs[k]);
  }
  if (g.output_size() != 1)
    return fail(fmt::format("the graph has {} outputs, not one (the loss)", g.output_size()),
                "export a module whose forward returns only the loss (docs/onnx.md)");
  Value& loss = values[g.output(0).name()];
  const ir::TensorId loss_id = reader.tensor(loss, g.output(0).name());
  if (!loss_id.valid() || loss.constant || !reader.dims(loss).empty())
    return fail(fmt::format("the output '{}' is not a scalar loss computed from the inputs", g.output(0).name()),
                "export a module whose forward returns the loss (docs/onnx.md)");
  reader.builder.set_loss(loss_id);
  LOOM_ASSIGN_OR_RETURN(ir::Graph graph, std::move(reader.builder).finish());
  for (auto& [id, elements] : reader.buffer_values) graph.tensor(id).value = std::move(elements);
  LOOM_RETURN_IF_ERROR(ir::validate_graph(graph, catalog));
  return graph;
}

}  // namespace

Expected<OnnxOptions> parse_onnx_dims(std::string_view text) {
  OnnxOptions options;
  for (const std::string& item : split(text, ',')) {
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    const std::string name = eq == std::string::npos ? item : item.substr(0, eq);
    std::int64_t value = 0;
    const std::string digits = eq == std::string::npos ? std::string() : item.substr(eq + 1);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    const bool parsed = !digits.empty() && ec == std::errc() && end == digits.data() + digits.size() && value > 0;
    if (name.empty() || !parsed)
      return fail(fmt::format("--onnx-dim '{}' is not NAME=SIZE with a positive size", item), "e.g. --onnx-dim batch=8,seq=128");
    if (!options.dims.emplace(name, value).second)
      return fail(fmt::format("--onnx-dim names '{}' twice", name), "give each symbolic dim once");
  }
  return options;
}

bool is_onnx_path(std::string_view path) { return path.ends_with(".onnx"); }

Expected<ir::Graph> onnx_to_graph(const std::string& bytes, const std::string& label, const ir::OpCatalog& catalog,
                                  const OnnxOptions& options) {
  onnx::ModelProto model;
  if (bytes.empty() || !model.ParseFromString(bytes))
    return fail(fmt::format("{}: not a readable ONNX model (the protobuf does not parse{})", label,
                            bytes.empty() ? ": the file is empty" : ""),
                "the file is truncated or not ONNX: export it again with torch.onnx.export (docs/onnx.md)");
  if (!model.has_graph() || model.graph().node_size() == 0)
    return fail(fmt::format("{}: the model has no graph nodes", label),
                "the file is truncated or not an ONNX model: export it again");
  LOOM_RETURN_IF_ERROR(with_context(check_opset(model), label));
  return with_context(read_graph(model, catalog, options), label);
}

Expected<ir::Graph> load_onnx_file(const std::string& path, const ir::OpCatalog& catalog, const OnnxOptions& options) {
  LOOM_ASSIGN_OR_RETURN(std::string bytes, read_input_file(path, "ONNX model",
                                                           "check the path; docs/onnx.md shows how to export one",
                                                           kMaxOnnxBytes));
  return onnx_to_graph(bytes, path, catalog, options);
}

}  // namespace loom::frontend

namespace loom::frontend::onnx_reader {

const Handler* find_handler(std::string_view op_type) {
  static const std::map<std::string_view, Handler> table = [] {
    std::vector<std::pair<std::string_view, Handler>> entries;
    add_math_handlers(entries);
    add_shape_handlers(entries);
    return std::map<std::string_view, Handler>(entries.begin(), entries.end());
  }();
  const auto it = table.find(op_type);
  return it == table.end() ? nullptr : &it->second;
}

}  // namespace loom::frontend::onnx_reader
