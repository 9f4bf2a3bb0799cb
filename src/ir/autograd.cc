// The small parts of autograd.h: optimizer names, the combined pass, and decoding a backward op's
// layout. The passes themselves live in backward_pass.cc and optimizer_pass.cc.
#include "loom/ir/autograd.h"

#include <limits>

#include <array>

namespace loom::ir {

namespace {
constexpr std::array<std::string_view, 3> kOptimizerNames = {"sgd", "adam", "adamw"};
constexpr std::array<std::string_view, 3> kGradPartNames = {"whole", "input", "weight"};
}  // namespace

std::string_view name(GradPart part) { return kGradPartNames[static_cast<std::size_t>(part)]; }

GradPart grad_part(const Op& backward_op) {
  const auto it = backward_op.attrs.find("grad_part");
  if (it == backward_op.attrs.end()) return GradPart::whole;
  const auto* text = std::get_if<std::string>(&it->second);
  if (text == nullptr) return GradPart::whole;
  for (std::size_t i = 1; i < kGradPartNames.size(); ++i)
    if (kGradPartNames[i] == *text) return static_cast<GradPart>(i);
  return GradPart::whole;
}

std::string_view name(OptimizerKind kind) { return kOptimizerNames[static_cast<std::size_t>(kind)]; }

Expected<OptimizerKind> parse_optimizer(std::string_view text) {
  for (std::size_t i = 0; i < kOptimizerNames.size(); ++i)
    if (kOptimizerNames[i] == text) return static_cast<OptimizerKind>(i);
  return fail(fmt::format("unknown optimizer '{}'", text), "use sgd, adam or adamw");
}

Expected<Graph> build_training_graph(const Graph& forward, const OpCatalog& catalog, const OptimizerOptions& options) {
  LOOM_ASSIGN_OR_RETURN(Graph with_backward, add_backward(forward, catalog));
  return add_optimizer(with_backward, catalog, options);
}

namespace {

// Forward positions: non-negative and strictly increasing (each position at most once).
Expected<std::vector<int>> positions(const Op& op, std::string_view key) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> values, get_int_list(op.attrs, key));
  std::vector<int> result;
  for (std::int64_t v : values) {
    if (v < 0 || v > std::numeric_limits<int>::max() || (!result.empty() && v <= result.back()))
      return fail(fmt::format("backward op '{}': '{}' must list increasing non-negative positions, got {}", op.name,
                              key, to_string(AttrValue(values))));
    result.push_back(static_cast<int>(v));
  }
  return result;
}

}  // namespace

Expected<MirrorLayout> mirror_layout(const Op& backward_op) {
  if (!backward_op.is_mirror())
    return fail(fmt::format("op '{}' mirrors no forward op, so it has no backward layout", backward_op.name));
  MirrorLayout layout;
  const auto context = fmt::format("backward op '{}'", backward_op.name);
  LOOM_ASSIGN_OR_RETURN(layout.grad_outputs, with_context(positions(backward_op, "grad_outputs"), context));
  LOOM_ASSIGN_OR_RETURN(layout.grad_inputs, with_context(positions(backward_op, "grad_inputs"), context));
  LOOM_ASSIGN_OR_RETURN(layout.saved_inputs, with_context(get_bool(backward_op.attrs, "saved_inputs"), context));
  LOOM_ASSIGN_OR_RETURN(layout.saved_outputs, with_context(get_bool(backward_op.attrs, "saved_outputs"), context));
  LOOM_ASSIGN_OR_RETURN(const std::string part, with_context(get_string_or(backward_op.attrs, "grad_part", "whole"), context));
  if (part != "input" && part != "weight" && part != "whole")
    return fail(fmt::format("backward op '{}': 'grad_part' is '{}'", backward_op.name, part), "use input or weight");
  layout.part = part == "input" ? GradPart::input : part == "weight" ? GradPart::weight : GradPart::whole;
  if (layout.grad_inputs.size() != backward_op.outputs.size())
    return fail(fmt::format("backward op '{}' writes {} gradients but 'grad_inputs' lists {}", backward_op.name,
                            backward_op.outputs.size(), layout.grad_inputs.size()));
  if (layout.grad_outputs.size() > backward_op.inputs.size())
    return fail(fmt::format("backward op '{}' reads {} tensors but 'grad_outputs' lists {} gradients",
                            backward_op.name, backward_op.inputs.size(), layout.grad_outputs.size()));
  return layout;
}

}  // namespace loom::ir
