// Prefix sums along one dim (cumsum: RoBERTa-family position ids from the padding mask). Each output
// element depends on every earlier one along the scanned dim, so that dim is frozen ('^'); the other
// dims are independent lanes and split freely.
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

// torch.cumsum promotes integers and booleans to i64 (unless a dtype is given: the tracer casts then).
Expected<OpSignature> cumsum_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "cumsum", "one input (x)"));
  const std::size_t rank = call.input_shapes[0].rank();
  if (rank == 0) return fail("cumsum: x is a scalar", "cumsum scans a dimension of a tensor of rank >= 1");
  LOOM_ASSIGN_OR_RETURN(std::int64_t dim, ir::get_int(call.attrs, "dim"));
  LOOM_ASSIGN_OR_RETURN(std::size_t axis, normalize_dim(dim, rank, "cumsum"));
  TensorDims dims = indexed_dims(rank);
  dims[axis] += '^';
  std::vector<ir::DType> dtypes;
  if (!call.input_dtypes.empty() && !ir::is_floating(call.input_dtypes[0])) dtypes = {ir::DType::i64};
  return OpSignature{annotation_text({dims}, {dims}), {}, std::move(dtypes)};
}

}  // namespace

void register_scan_ops(OpRegistry& r) {
  r.add_builtin({.type = "cumsum",
                 .family = "scan",
                 .summary = "running sum of x along dim (integers and booleans give i64)",
                 .op_class = ir::OpClass::reduction,
                 .attrs = {{"dim", ir::AttrKind::integer, true, "the scanned dim (negative counts from the end)"}},
                 .signature = cumsum_signature,
                 .flops = ir::flops_per_output_element(1),
                 // The gradient is the reversed running sum of the output gradient: no saved tensors.
                 .backward = {.saves_inputs = false, .flops_factor = 1.0}});
}

}  // namespace loom::ops
