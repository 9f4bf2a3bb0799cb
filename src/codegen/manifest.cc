#include "manifest.h"

#include <cmath>

#include "loom/ir/autograd.h"
#include "loom/ir/leaf_values.h"

namespace loom::codegen::detail {
namespace {

using nlohmann::json;

json attr_json(const ir::AttrValue& value) {
  return std::visit(
      [](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>) {
          if (std::isnan(v)) return "nan";
          if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
        }
        return v;
      },
      value);
}

json attrs_json(const ir::Attrs& attrs) {
  json out = json::object();
  for (const auto& [key, value] : attrs) out[key] = attr_json(value);
  return out;
}

// Local shape, dtype, box offset and the FullTensor's shape: what a position-dependent op form needs.
json piece_json(const ir::Graph& graph, const plan::SubTensor& piece) {
  const ir::FullTensor& full = graph.tensor(piece.tensor);
  json offset = json::array(), step = json::array();
  for (const plan::IndexRange& r : piece.box) {
    offset.push_back(r.start);
    step.push_back(r.step);
  }
  return json{{"shape", piece.local_shape().dims}, {"dtype", std::string(ir::name(full.dtype))},
              {"offset", offset},                  {"step", step},
              {"full", full.shape.dims}};
}

json pieces_json(const ir::Graph& graph, const std::vector<plan::SubTensor>& pieces) {
  json out = json::array();
  for (const plan::SubTensor& p : pieces) out.push_back(piece_json(graph, p));
  return out;
}

}  // namespace

json tensor_entry(const ir::Graph& graph, ir::TensorId id) {
  const ir::FullTensor& t = graph.tensor(id);
  json entry{{"shape", t.shape.dims}, {"dtype", std::string(ir::name(t.dtype))}, {"role", std::string(ir::name(t.role))}};
  if (!t.value.empty()) {
    // The program's own constant: non-finite elements as strings (JSON has no inf / nan).
    json value = json::array();
    for (double v : t.value) {
      if (std::isnan(v)) value.push_back("nan");
      else if (std::isinf(v)) value.push_back(v > 0 ? "inf" : "-inf");
      else value.push_back(v);
    }
    entry["init"] = "constant";
    entry["value"] = std::move(value);
  } else if (t.derived) {
    // Computed by the runtime from the whole value of `from` in the same step (ir/derived_input.h).
    entry["init"] = "derived";
    json derived{{"from", graph.tensor(t.derived->from).name}, {"kind", "counted_tokens"},
                 {"ignore_index", t.derived->ignore_index}};
    if (!t.derived->trim.empty()) derived["trim"] = t.derived->trim;
    entry["derived"] = std::move(derived);
  } else if (t.role == ir::TensorRole::optimizer_state) {
    const ir::TensorId param = ir::master_copy_of(graph, id);
    entry["init"] = param.valid() ? "copy" : "zeros";
    if (param.valid()) entry["copy_of"] = graph.tensor(param).name;
  } else if (ir::is_floating(t.dtype)) {
    entry["init"] = "uniform";
  } else {
    entry["init"] = "integer";
    entry["bound"] = ir::integer_bound(graph, id);
  }
  return entry;
}

Expected<json> sub_op_entry(const plan::Plan& plan, plan::SubOpId id) {
  const ir::Graph& graph = *plan.graph;
  const plan::SubOp& s = plan.sub_op(id);
  const ir::Op& op = graph.op(s.op);
  json entry{{"name", s.name},
             {"type", op.type},
             {"attrs", attrs_json(op.attrs)},
             {"inputs", pieces_json(graph, s.inputs)},
             {"outputs", pieces_json(graph, s.outputs)}};
  json shape_only = json::array();
  for (std::size_t i = 0; i < s.inputs.size(); ++i)
    if (plan.layouts[s.op.index()].shape_only(i)) shape_only.push_back(i);
  entry["shape_only"] = shape_only;
  if (!op.is_mirror()) return entry;
  if (!s.mirror.valid()) return failf("sub-op '{}' is a backward part without its forward part", s.name);
  LOOM_ASSIGN_OR_RETURN(ir::MirrorLayout layout, with_context(ir::mirror_layout(op), fmt::format("sub-op '{}'", s.name)));
  const plan::SubOp& forward = plan.sub_op(s.mirror);
  const ir::Op& forward_op = graph.op(forward.op);
  entry["backward_of"] = json{{"type", forward_op.type},
                              {"attrs", attrs_json(forward_op.attrs)},
                              {"inputs", pieces_json(graph, forward.inputs)},
                              {"outputs", pieces_json(graph, forward.outputs)},
                              {"saved_inputs", layout.saved_inputs},
                              {"saved_outputs", layout.saved_outputs},
                              {"grad_inputs", layout.grad_inputs},
                              {"grad_outputs", layout.grad_outputs}};
  return entry;
}

}  // namespace loom::codegen::detail
