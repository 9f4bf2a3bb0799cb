// User-defined ops (`loom.register_op(fn, "annotation")` in Python, docs/custom_ops.md): a graph file
// carries their definitions, and a CustomCatalog layers them over the built-in registry for the one job
// that reads the file. Explicit rather than a process-wide registry extension: the built-in table stays
// immutable, two graph files in one process cannot see each other's ops, and whoever plans a graph
// with custom ops passes the catalog that knows them (api::plan_model, frontend::load_graph_file).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/op_def.h"
#include "loom/ops/registry.h"

namespace loom::ops {

// Every custom op type starts with this prefix, so it never collides with a present or future built-in.
inline constexpr std::string_view kCustomOpPrefix = "custom.";
// The op attribute naming the Python callable, "package.module:qualname" (the runtime imports it).
inline constexpr std::string_view kCallableAttr = "callable";

struct CustomOpSpec {
  std::string type;               // "custom.bias_gelu"
  std::string annotation;         // "b s h, h -> b s h": how the op may be partitioned
  double flops_per_element = 0;   // forward FLOPs per element of output 0; 0: priced by its memory traffic
  bool differentiable = true;     // false: no backward op, no gradient flows through it
};

// The OpDef of a spec: a fixed signature (the annotation), FLOPs per output element, backward by the
// framework's autograd of the callable (saves its inputs). Errors name the op and the fix: a type
// without the prefix, an annotation that does not parse, an output identifier no input binds, a
// negative or non-finite FLOP count.
Expected<ir::OpDef> custom_op_def(const CustomOpSpec& spec);

// For reference interpreters (`loom verify`): why a custom op has no kernel there, or "" for other types.
std::string no_reference_kernel_hint(std::string_view type);

// The built-in catalog (or any base) plus one graph's custom ops. The base must outlive it.
class CustomCatalog final : public ir::OpCatalog {
 public:
  explicit CustomCatalog(const ir::OpCatalog& base) : base_(&base) {}

  // Errors: a bad spec (custom_op_def), a type the base already defines, a type defined twice.
  Expected<void> add(const CustomOpSpec& spec);

  const ir::OpDef* find(std::string_view type) const override;
  std::vector<const ir::OpDef*> custom_ops() const { return custom_.all(); }
  bool has_custom_ops() const { return custom_.size() > 0; }

 private:
  const ir::OpCatalog* base_;
  OpRegistry custom_;
};

}  // namespace loom::ops
