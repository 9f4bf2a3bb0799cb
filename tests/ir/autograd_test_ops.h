// A small catalog for the autograd tests: the real linear algebra, autograd and optimizer ops plus
// test-only ops whose backward rules cover the cases the passes must handle (saved outputs,
// no-gradient inputs, non-differentiable ops, several outputs), independent of the other families.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/ir/graph.h"
#include "loom/ops/families.h"
#include "loom/ops/registry.h"

namespace loom::ir::testing {

// Lookups by name shared by the autograd and optimizer tests.
inline const FullTensor* find_tensor(const Graph& g, std::string_view name) {
  for (const FullTensor& t : g.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

inline const Op* find_op(const Graph& g, std::string_view name) {
  for (const Op& op : g.ops)
    if (op.name == name) return &op;
  return nullptr;
}

inline std::vector<std::string> names(const Graph& g, const std::vector<TensorId>& ids) {
  std::vector<std::string> result;
  for (TensorId id : ids) result.push_back(g.tensor(id).name);
  return result;
}


inline const ops::OpRegistry& autograd_test_ops() {
  static const ops::OpRegistry registry = [] {
    ops::OpRegistry r;
    ops::register_linalg_ops(r);
    ops::register_autograd_ops(r);
    ops::register_optimizer_ops(r);
    // Sum of a matrix: the scalar loss.
    r.add_builtin({.type = "test_loss", .signature = fixed_signature("a+ b+ -> "), .flops = no_flops()});
    // Loss against targets that get no gradient (labels).
    r.add_builtin({.type = "test_ce",
                   .signature = fixed_signature("a+ b+, a+ b+ -> "),
                   .flops = no_flops(),
                   .backward = {.no_grad_inputs = {1}}});
    r.add_builtin({.type = "test_add",
                   .signature = fixed_signature("a b, a b -> a b"),
                   .flops = no_flops(),
                   .backward = {.saves_inputs = false}});
    // relu-like: the backward reads the output, not the input.
    r.add_builtin({.type = "test_relu",
                   .signature = fixed_signature("a b -> a b"),
                   .flops = no_flops(),
                   .backward = {.saves_inputs = false, .saves_outputs = true}});
    r.add_builtin({.type = "test_twice",
                   .signature = fixed_signature("a b -> a b, a b"),
                   .flops = no_flops()});
    r.add_builtin({.type = "test_argmax",
                   .signature =
                       [](const OpCall&) -> Expected<OpSignature> {
                         return OpSignature{"a b^ -> a", {}, {DType::i64}};
                       },
                   .flops = no_flops(),
                   .backward = {.differentiable = false}});
    return r;
  }();
  return registry;
}

}  // namespace loom::ir::testing
