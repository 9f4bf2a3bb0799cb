// Linear algebra: contractions whose annotation marks the contracted identifier as a reduction,
// so splitting it yields partial sums (Megatron's row-parallel linear is exactly that split).
#include <cctype>
#include <set>

#include "loom/ops/families.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

Expected<OpSignature> matmul_signature(const OpCall& call) {
  if (call.input_shapes.size() != 2) return fail("matmul takes two inputs");
  const std::size_t ra = call.input_shapes[0].rank(), rb = call.input_shapes[1].rank();
  if (ra < 2 || rb < 2)
    return fail(fmt::format("matmul needs inputs of rank >= 2, got ranks {} and {}", ra, rb), "reshape vectors to [1, n]");
  if (rb == 2) return OpSignature{ra == 2 ? "m k+, k+ n -> m n" : "* m k+, k+ n -> * m n", {}, {}};
  if (ra != rb)
    return fail(fmt::format("matmul of ranks {} and {}: batch dimensions must match", ra, rb),
                "broadcast the smaller operand explicitly");
  return OpSignature{"* m k+, * k+ n -> * m n", {}, {}};
}

// "bij,bjk->bik" -> "b i j+, b j+ k -> b i k": identifiers missing from the output are reductions.
Expected<OpSignature> einsum_signature(const OpCall& call) {
  LOOM_ASSIGN_OR_RETURN(std::string equation, ir::get_string(call.attrs, "equation"));
  const std::size_t arrow = equation.find("->");
  if (arrow == std::string::npos)
    return fail(fmt::format("einsum equation '{}' has no '->'", equation), "write it explicitly, e.g. 'bij,bjk->bik'");
  const std::string lhs = equation.substr(0, arrow), rhs = equation.substr(arrow + 2);
  std::set<char> kept;
  for (char c : rhs) {
    if (!std::isalpha(static_cast<unsigned char>(c)))
      return fail(fmt::format("einsum equation '{}': output may hold only letters", equation));
    kept.insert(c);
  }
  std::string annotation;
  std::size_t operands = 1;
  for (char c : lhs) {
    if (c == ',') {
      annotation += ", ";
      ++operands;
      continue;
    }
    if (c == ' ') continue;
    if (!std::isalpha(static_cast<unsigned char>(c)))
      return fail(fmt::format("einsum equation '{}': unexpected '{}' (ellipsis is not supported)", equation, c));
    if (!annotation.empty() && annotation.back() != ' ') annotation += ' ';
    annotation += c;
    if (!kept.contains(c)) annotation += '+';
  }
  if (operands != call.input_shapes.size())
    return fail(fmt::format("einsum equation '{}' names {} operands, {} given", equation, operands,
                            call.input_shapes.size()));
  annotation += " ->";
  for (char c : rhs) {
    annotation += ' ';
    annotation += c;
  }
  return OpSignature{annotation, {}, {}};
}

}  // namespace

void register_linalg_ops(OpRegistry& r) {
  r.add_builtin({.type = "matmul",
                 .family = "linalg",
                 .summary = "matrix product, batched over leading dims",
                 .op_class = ir::OpClass::contraction,
                 .signature = matmul_signature,
                 .flops = ir::contraction_flops()});
  r.add_builtin({.type = "bmm",
                 .family = "linalg",
                 .summary = "batched matrix product [b m k] x [b k n]",
                 .op_class = ir::OpClass::contraction,
                 .signature = ir::fixed_signature("b m k+, b k+ n -> b m n"),
                 .flops = ir::contraction_flops()});
  // torch.nn.functional.linear: weight [out, in]. Splitting 'o' is column parallel, 'i' row parallel.
  r.add_builtin({.type = "linear",
                 .family = "linalg",
                 .summary = "x W^T (+ b), weight [out, in]",
                 .op_class = ir::OpClass::contraction,
                 .signature =
                     [](const OpCall& call) -> Expected<OpSignature> {
                       if (call.input_shapes.size() == 2) return OpSignature{"* i+, o i+ -> * o", {}, {}};
                       if (call.input_shapes.size() == 3) return OpSignature{"* i+, o i+, o -> * o", {}, {}};
                       return fail("linear takes (x, weight) or (x, weight, bias)");
                     },
                 .flops = ir::contraction_flops(),
                 .additive_inputs = {2}});
  r.add_builtin({.type = "einsum",
                 .family = "linalg",
                 .summary = "tensor contraction given by an einsum equation",
                 .op_class = ir::OpClass::contraction,
                 .attrs = {{"equation", ir::AttrKind::string, true, "e.g. 'bij,bjk->bik'"}},
                 .signature = einsum_signature,
                 .flops = ir::contraction_flops()});
}

}  // namespace loom::ops
