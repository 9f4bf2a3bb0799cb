// The readable text form. Layout:
//
//   graph "tiny"
//   %0 = input "x" f32[8, 16]
//   %4 = gradient "w.grad" f32[32, 16]  of %1
//   %9 = parameter "w.next" f32[32, 16]  updates %1
//   #0 linear "fc" (%0, %1) -> (%2)  [* i+, o i+ -> * o]
//   #1 einsum "mix" (%2, %3) -> (%5)  [b i j+, b j+ k -> b i k]  {equation="bij,bjk->bik"}
//   #2 backward linear "fc" (%0, %1, %6) -> (%7, %4)  [* i+, o i+ -> * o]  mirrors #0  {...}
//   loss %5
//
// Tensors first, then ops in program order. Forward ops carry no pass word; backward and optimizer ops
// do. Reals always show a decimal point or exponent so that 1.0 and 1 stay distinguishable.
#include "loom/ir/graph_text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "loom/core/strings.h"

namespace loom::ir {
namespace {

std::string real_text(double value) {
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";  // 'n' covers inf and nan
  return text;
}

std::string attr_text(const AttrValue& value) {
  if (const auto* real = std::get_if<double>(&value)) return real_text(*real);
  if (const auto* text = std::get_if<std::string>(&value)) return quoted(*text);
  return to_string(value);
}

std::string tensor_ref(TensorId id) { return id.valid() ? fmt::format("%{}", id.value) : std::string("%?"); }

std::string tensor_list(const std::vector<TensorId>& ids) {
  std::string out = "(";
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i == 0 ? "" : ", ") + tensor_ref(ids[i]);
  return out + ")";
}

std::string tensor_line(const FullTensor& t) {
  std::string line = fmt::format("{} = {} {} {}{}", tensor_ref(t.id), name(t.role), quoted(t.name), name(t.dtype),
                                 t.shape.to_string());
  if (t.owner.valid()) line += "  of " + tensor_ref(t.owner);
  if (t.updates.valid()) line += "  updates " + tensor_ref(t.updates);
  return line;
}

std::string op_line(const Op& op) {
  std::string line = fmt::format("#{} ", op.id.value);
  if (op.pass != Pass::forward) line += fmt::format("{} ", name(op.pass));
  line += fmt::format("{} {} {} -> {}  [{}]", op.type, quoted(op.name), tensor_list(op.inputs),
                      tensor_list(op.outputs), op.annotation);
  if (op.mirror_of.valid()) line += fmt::format("  mirrors #{}", op.mirror_of.value);
  if (!op.attrs.empty()) {
    std::vector<std::string> parts;
    for (const auto& [key, value] : op.attrs) parts.push_back(fmt::format("{}={}", key, attr_text(value)));
    line += fmt::format("  {{{}}}", fmt::join(parts, ", "));
  }
  return line;
}

}  // namespace

std::string graph_to_text(const Graph& graph) {
  std::string out = fmt::format("graph {}\n", quoted(graph.name));
  for (const FullTensor& t : graph.tensors) out += tensor_line(t) + "\n";
  for (const Op& op : graph.ops) out += op_line(op) + "\n";
  if (graph.loss.valid()) out += fmt::format("loss {}\n", tensor_ref(graph.loss));
  return out;
}

}  // namespace loom::ir
