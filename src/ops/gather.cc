// index_select: rows of x picked by a 1-D integer index along one dim. The indexed dim of x is frozen
// (any row may be picked, so x stays whole along it); the index splits freely, each part gathering
// its own rows, as do x's other dims.
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

Expected<OpSignature> index_select_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 2, 2, "index_select", "two inputs (x, index)"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 1, 1, "index_select", "[n] (a 1-D index)"));
  LOOM_RETURN_IF_ERROR(expect_integer(call, 1, "index_select", "index"));
  const std::size_t rank = call.input_shapes[0].rank();
  if (rank == 0) return fail("index_select: x is a scalar", "x needs the dim the index selects along");
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim, ir::get_int(call.attrs, "dim"));
  LOOM_ASSIGN_OR_RETURN(std::size_t axis, normalize_dim(dim, rank, "index_select"));
  TensorDims x = indexed_dims(rank), out;
  for (std::size_t k = 0; k < rank; ++k) out.push_back(k == axis ? std::string("i") : x[k]);
  x[axis] += '^';
  return OpSignature{annotation_text({x, {"i"}}, {out}), {}, {}};
}

}  // namespace

void register_gather_ops(OpRegistry& r) {
  r.add_builtin({.type = "index_select",
                 .family = "gather",
                 .summary = "x's slices at the positions of a 1-D integer index along dim",
                 .op_class = ir::OpClass::embedding,
                 .attrs = {{"dim", ir::AttrKind::integer, true, "the dim the index selects along"}},
                 .signature = index_select_signature,
                 .flops = ir::no_flops(),
                 // Backward scatter-adds the output gradient into x's shape: it needs only the index.
                 .backward = {.no_grad_inputs = {1}, .flops_factor = 1.0}});
}

}  // namespace loom::ops
