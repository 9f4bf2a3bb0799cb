// A small catalog for the autograd tests: the real linear algebra, autograd and optimizer ops plus
// test-only ops whose backward rules cover the cases the passes must handle (saved outputs,
// no-gradient inputs, non-differentiable ops, several outputs), independent of the other families.
#pragma once

#include "loom/ops/families.h"
#include "loom/ops/registry.h"

namespace loom::ir::testing {

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
