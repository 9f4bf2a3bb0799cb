// Reductions over chosen dims. Sums and means are linear, so their reduced dims are '+' (shards give
// partial sums; a mean's shard divides by the full count); max and argmax are not, so theirs are frozen.
#include <algorithm>

#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

// Which dims an instance reduces: the 'dims' list, or every dim when it is absent.
Expected<std::vector<bool>> reduced_dims(const OpCall& call, std::string_view op) {
  const std::size_t rank = call.input_shapes[0].rank();
  std::vector<bool> reduced(rank, !call.attrs.contains("dims"));
  if (!call.attrs.contains("dims")) return reduced;
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> dims, ir::get_int_list(call.attrs, "dims"));
  if (dims.empty()) return fail(fmt::format("{}: 'dims' is empty", op), "leave it out to reduce every dim");
  for (std::int64_t d : dims) {
    LOOM_ASSIGN_OR_RETURN(std::size_t axis, normalize_dim(d, rank, op));
    if (reduced[axis]) return fail(fmt::format("{}: dim {} appears twice in 'dims'", op, d));
    reduced[axis] = true;
  }
  return reduced;
}

// "d0 d1+ d2 -> d0 d2" (or "d0 1 d2" with keepdim); `flag` marks the reduced dims.
ir::SignatureFn reduce_signature(std::string op, char flag, std::vector<ir::DType> output_dtypes = {}) {
  return [op = std::move(op), flag, output_dtypes](const OpCall& call) -> Expected<OpSignature> {
    LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, op, "one input (x)"));
    LOOM_ASSIGN_OR_RETURN(std::vector<bool> reduced, reduced_dims(call, op));
    LOOM_ASSIGN_OR_RETURN(bool keepdim, ir::get_bool_or(call.attrs, "keepdim", false));
    TensorDims in = indexed_dims(reduced.size()), out;
    for (std::size_t k = 0; k < in.size(); ++k) {
      if (!reduced[k]) {
        out.push_back(in[k]);
        continue;
      }
      if (keepdim) out.push_back("1");
      in[k] += flag;
    }
    return OpSignature{annotation_text({in}, {out}), {}, output_dtypes};
  };
}

// argmax over one dim, or over the flattened tensor when 'dim' is absent (then the output is a scalar).
Expected<OpSignature> argmax_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "argmax", "one input (x)"));
  const std::size_t rank = call.input_shapes[0].rank();
  LOOM_ASSIGN_OR_RETURN(bool keepdim, ir::get_bool_or(call.attrs, "keepdim", false));
  TensorDims in = indexed_dims(rank), out;
  std::vector<bool> reduced(rank, true);
  if (call.attrs.contains("dim")) {
    LOOM_ASSIGN_OR_RETURN(std::int64_t dim_attr, ir::get_int(call.attrs, "dim"));
    LOOM_ASSIGN_OR_RETURN(std::size_t dim, normalize_dim(dim_attr, rank, "argmax"));
    std::fill(reduced.begin(), reduced.end(), false);
    reduced[dim] = true;
  }
  for (std::size_t k = 0; k < rank; ++k) {
    if (!reduced[k]) {
      out.push_back(in[k]);
      continue;
    }
    if (keepdim) out.push_back("1");
    in[k] += '^';
  }
  return OpSignature{annotation_text({in}, {out}), {}, {ir::DType::i64}};
}

const std::vector<ir::AttrSpec> kReduceAttrs = {
    {"dims", ir::AttrKind::int_list, false, "reduced dims; every dim when absent"},
    {"keepdim", ir::AttrKind::boolean, false, "keep reduced dims as size 1, default false"}};

ir::OpDef reduction(std::string type, std::string summary, ir::SignatureFn signature, ir::BackwardRule backward,
                    std::vector<ir::AttrSpec> attrs = kReduceAttrs) {
  return {.type = std::move(type),
          .family = "reduce",
          .summary = std::move(summary),
          .op_class = ir::OpClass::reduction,
          .attrs = std::move(attrs),
          .signature = std::move(signature),
          .flops = ir::flops_per_input_element(1),
          .backward = std::move(backward)};
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  // Their backward broadcasts the output gradient: the inputs are not needed.
  r.add_builtin(reduction("sum", "sum over dims", reduce_signature("sum", '+'), {.saves_inputs = false, .flops_factor = 1.0}));
  r.add_builtin(reduction("mean", "mean over dims", reduce_signature("mean", '+'), {.saves_inputs = false, .flops_factor = 1.0}));
  // The gradient goes to the arg-max positions: found again from the input and the output.
  const ir::BackwardRule max_backward{.saves_outputs = true, .flops_factor = 1.0};
  r.add_builtin(reduction("max", "maximum over dims (values only)", reduce_signature("max", '^'), max_backward));
  r.add_builtin(reduction("amax", "maximum over dims", reduce_signature("amax", '^'), max_backward));
  r.add_builtin(reduction("argmax", "index of the maximum (i64), over one dim or the flattened tensor", argmax_signature,
                          {.differentiable = false},
                          {{"dim", ir::AttrKind::integer, false, "reduced dim; the flattened tensor when absent"},
                           {"keepdim", ir::AttrKind::boolean, false, "keep the dim as size 1, default false"}}));
}

}  // namespace loom::ops
