// Training-mode batch norm as three ops whose batch and spatial splits are exact, so data parallelism
// can split a CNN's batch and still train as one device (SyncBatchNorm's semantics, per channel c):
//
//   sum, count = batch_norm_sums(x)                          n+ s+: sum x and the element count
//   squares    = batch_norm_centered_sums(x, sum, count)     n+ s+: sum (x - sum / count)^2
//   y          = batch_norm_from_sums(x, sum, squares, count, weight, bias)
//              = (x - mean) / sqrt(squares / count + eps) * weight + bias,  mean = sum / count
//
// The statistics are sums over the batch and space, so a plan splitting n (or h, w) leaves value parts
// that it all-reduces before the normalization reads them: two per-channel exchanges forward (the
// variance is taken about the global mean, two passes as torch does, not E[x^2] - E[x]^2, which cancels
// in f32). Backward needs no rule of its own: the gradients of sum and squares that from_sums produces
// are sums over the batch (value parts under a split, all-reduced), and the sums ops pass them back.
// The centered sums take no gradient through the mean: d squares / d mean = -2 sum (x - mean) is 0.
// The count is an integer-valued statistic and takes none at all.
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

// x = [n, c, spatial...]: n and the spatial dims carry `flag` ('+' for the sums, none for the
// normalization); channels are independent.
TensorDims channel_layout(std::size_t rank, char flag) {
  static const std::vector<TensorDims> named = {{}, {"l"}, {"h", "w"}, {"d", "h", "w"}};
  const TensorDims spatial = rank - 2 < named.size() ? named[rank - 2] : indexed_dims(rank - 2, "s");
  TensorDims dims = {flag == 0 ? std::string("n") : std::string("n") + flag, "c"};
  for (const std::string& s : flag == 0 ? spatial : flagged(spatial, flag)) dims.push_back(s);
  return dims;
}

// x must be floating [n, c, ...]; inputs from `first` on must be per-channel [c].
Expected<void> check_channels(const OpCall& call, std::string_view op, std::size_t first) {
  const ir::Shape& x = call.input_shapes[0];
  if (x.rank() < 2)
    return fail(fmt::format("{}: input 0 must be [n, c, ...] of rank >= 2, got shape {}", op, x.to_string()));
  if (!ir::is_floating(call.input_dtypes[0]))
    return fail(fmt::format("{}: input 0 must be floating, got {}", op, ir::name(call.input_dtypes[0])));
  for (std::size_t i = first; i < call.input_shapes.size(); ++i)
    if (call.input_shapes[i] != ir::Shape{x[1]})
      return fail(fmt::format("{}: input {} has shape {}, expected [{}]: one value per channel of x {}", op, i,
                              call.input_shapes[i].to_string(), x[1], x.to_string()));
  return {};
}

// (x [n, c, ...]) -> (sum [c], count [c]), both f32.
Expected<OpSignature> sums_signature(const OpCall& call) {
  constexpr std::string_view op = "batch_norm_sums";
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, op, "one input (x [n, c, ...])"));
  LOOM_RETURN_IF_ERROR(check_channels(call, op, 1));
  return OpSignature{annotation_text({channel_layout(call.input_shapes[0].rank(), '+')}, {{"c"}, {"c"}}), {},
                     {ir::DType::f32, ir::DType::f32}};
}

// (x [n, c, ...], sum [c], count [c]) -> squares [c] f32.
Expected<OpSignature> centered_signature(const OpCall& call) {
  constexpr std::string_view op = "batch_norm_centered_sums";
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 3, 3, op, "three inputs (x [n, c, ...], sum [c], count [c])"));
  LOOM_RETURN_IF_ERROR(check_channels(call, op, 1));
  return OpSignature{
      annotation_text({channel_layout(call.input_shapes[0].rank(), '+'), {"c"}, {"c"}}, {{"c"}}), {}, {ir::DType::f32}};
}

// (x, sum, squares, count, weight, bias) -> y, x's shape and dtype; every dim splits.
Expected<OpSignature> from_sums_signature(const OpCall& call) {
  constexpr std::string_view op = "batch_norm_from_sums";
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 6, 6, op,
                                     "six inputs (x [n, c, ...], sum, squares, count, weight, bias, each [c])"));
  LOOM_RETURN_IF_ERROR(check_channels(call, op, 1));
  const TensorDims x = channel_layout(call.input_shapes[0].rank(), 0);
  return OpSignature{annotation_text({x, {"c"}, {"c"}, {"c"}, {"c"}, {"c"}}, {x}), {}, {call.input_dtypes[0]}};
}

ir::OpDef part(std::string type, std::string summary, ir::SignatureFn signature, ir::CostFn flops,
               std::vector<int> no_grad) {
  return {.type = std::move(type),
          .family = "norm",
          .summary = std::move(summary),
          .op_class = ir::OpClass::normalization,
          .attrs = {},
          .signature = std::move(signature),
          .flops = std::move(flops),
          .backward = {.no_grad_inputs = std::move(no_grad), .flops_factor = 2.0}};
}

}  // namespace

void register_batch_norm_parts_ops(OpRegistry& r) {
  // An add per element.
  r.add_builtin(part("batch_norm_sums", "per channel, sum of x [n, c, ...] over batch and space, and the count",
                     sums_signature, ir::flops_per_input_element(1), {}));
  // Subtract, square, add per element.
  r.add_builtin(part("batch_norm_centered_sums",
                     "per channel, sum over batch and space of (x - sum / count)^2: batch norm's variance part",
                     centered_signature, ir::flops_per_input_element(3), {1, 2}));
  // Subtract, scale, weight, bias per element (the per-channel factors are negligible).
  ir::OpDef from_sums = part("batch_norm_from_sums",
                             "batch norm of x from the summed statistics: (x - mean) / sqrt(var + eps) w + b",
                             from_sums_signature, ir::flops_per_output_element(4), {3});
  from_sums.attrs = {{"eps", ir::AttrKind::real, false, "added to the variance, default 1e-5"}};
  r.add_builtin(std::move(from_sums));
}

}  // namespace loom::ops
