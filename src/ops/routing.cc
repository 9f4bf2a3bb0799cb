// Routing: topk, the k largest (or smallest) entries along one dim with their positions, as
// mixture-of-experts routers pick their experts. The ranked dim is frozen (an entry's rank depends
// on the whole row); every other dim splits, each part ranking its own rows.
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

Expected<OpSignature> topk_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "topk", "one input (x)"));
  const std::size_t rank = call.input_shapes[0].rank();
  if (rank == 0) return fail("topk: x is a scalar", "x needs the dim the entries are ranked along");
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim, ir::get_int_or(call.attrs, "dim", -1));
  LOOM_ASSIGN_OR_RETURN(std::size_t axis, normalize_dim(dim, rank, "topk"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t k, ir::get_int(call.attrs, "k"));
  const std::int64_t size = call.input_shapes[0][axis];
  if (k < 0 || k > size)
    return fail(fmt::format("topk: k {} is outside [0, {}] (the size of dim {})", k, size, dim),
                "k may not exceed the ranked dim");
  TensorDims x = indexed_dims(rank), out = x;
  x[axis] += '^';
  out[axis] = "k^";
  const ir::DType values = call.input_dtypes.empty() ? ir::DType::f32 : call.input_dtypes[0];
  return OpSignature{annotation_text({x}, {out, out}), {{"k", k}}, {values, ir::DType::i64}};
}

// A selection pass compares each entry once against the kept set's bound.
double topk_flops(const ir::OpInstance& op) { return static_cast<double>(op.inputs[0].numel()); }

}  // namespace

void register_routing_ops(OpRegistry& r) {
  r.add_builtin({.type = "topk",
                 .family = "routing",
                 .summary = "the k largest (or smallest) entries of x along dim and their positions (i64)",
                 .op_class = ir::OpClass::reduction,
                 .attrs = {{"k", ir::AttrKind::integer, true, "entries kept per row"},
                           {"dim", ir::AttrKind::integer, false, "the ranked dim, default -1"},
                           {"largest", ir::AttrKind::boolean, false, "the largest entries (default) or the smallest"},
                           {"sorted", ir::AttrKind::boolean, false, "kept in rank order (default true)"}},
                 .signature = topk_signature,
                 .flops = topk_flops,
                 // Backward scatters the values' gradient to the positions picked; it reads only x.
                 .backward = {.flops_factor = 0.5}});
}

}  // namespace loom::ops
