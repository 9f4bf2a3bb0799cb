// Normalizations. The dims a norm takes its statistics over are frozen ('^'): splitting them would
// need a synchronized (all-reduced) mean and variance, which a plain split does not provide.
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

const std::vector<ir::AttrSpec> kEps = {{"eps", ir::AttrKind::real, false, "added to the variance, default 1e-5"}};

Expected<OpSignature> layer_norm_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 2, 3, "layer_norm", "(x, weight) or (x, weight, bias)"));
  if (call.input_shapes.size() == 2) return OpSignature{"* h^, h^ -> * h^", {}, {}};
  return OpSignature{"* h^, h^, h^ -> * h^", {}, {}};
}

Expected<OpSignature> rms_norm_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 2, 2, "rms_norm", "two inputs (x, weight)"));
  return OpSignature{"* h^, h^ -> * h^", {}, {}};
}

// Spatial dims after [n, c]: "l", "h w" or "d h w" (conv layouts), else s0 s1 ...
TensorDims spatial_dims(std::size_t count) {
  if (count == 1) return {"l"};
  if (count == 2) return {"h", "w"};
  if (count == 3) return {"d", "h", "w"};
  return indexed_dims(count, "s");
}

Expected<void> expect_channels_layout(const OpCall& call, std::string_view op) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 3, 3, op, "three inputs (x, weight, bias)"));
  if (call.input_shapes[0].rank() < 2)
    return fail(fmt::format("{}: input 0 must be [n, c, ...] of rank >= 2, got shape {}", op,
                            call.input_shapes[0].to_string()));
  return {};
}

// Batch statistics span n and the spatial dims: splitting n would need synchronized statistics
// (SyncBatchNorm), so n is frozen along with them; channels are independent. The tracer lowers training
// batch norm to the batch_norm_sums / _centered_sums / _from_sums parts instead, whose splits are exact
// (src/ops/batch_norm_parts.cc); this whole op stays for zoo models and keeps plans exact by gathering.
Expected<OpSignature> batch_norm_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_channels_layout(call, "batch_norm"));
  TensorDims x = {"n^", "c"};
  for (const std::string& s : flagged(spatial_dims(call.input_shapes[0].rank() - 2), '^')) x.push_back(s);
  return OpSignature{annotation_text({x, {"c"}, {"c"}}, {x}), {}, {}};
}

// Statistics per (sample, group of channels): samples split freely, channels and space do not.
Expected<OpSignature> group_norm_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_channels_layout(call, "group_norm"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t groups, ir::get_int(call.attrs, "groups"));
  const std::int64_t channels = call.input_shapes[0][1];
  if (groups <= 0 || channels % groups != 0)
    return fail(fmt::format("group_norm: {} channels cannot form {} groups", channels, groups),
                "groups must be positive and divide the channel count");
  TensorDims x = {"n", "c^"};
  for (const std::string& s : flagged(spatial_dims(call.input_shapes[0].rank() - 2), '^')) x.push_back(s);
  return OpSignature{annotation_text({x, {"c^"}, {"c^"}}, {x}), {}, {}};
}

ir::OpDef norm(std::string type, std::string summary, ir::SignatureFn signature, double flops,
               std::vector<ir::AttrSpec> attrs) {
  return {.type = std::move(type),
          .family = "norm",
          .summary = std::move(summary),
          .op_class = ir::OpClass::normalization,
          .attrs = std::move(attrs),
          .signature = std::move(signature),
          .flops = ir::flops_per_output_element(flops),
          .backward = {.flops_factor = 2.0}};
}

}  // namespace

void register_norm_ops(OpRegistry& r) {
  r.add_builtin(norm("layer_norm", "normalize over the last dim, then weight (and bias)", layer_norm_signature, 5, kEps));
  r.add_builtin(norm("rms_norm", "x / rms(x) over the last dim, times weight", rms_norm_signature, 4, kEps));
  std::vector<ir::AttrSpec> batch_attrs = kEps;
  batch_attrs.push_back({"momentum", ir::AttrKind::real, false, "running-statistics momentum, default 0.1"});
  r.add_builtin(norm("batch_norm", "normalize each channel over batch and space", batch_norm_signature, 5,
                     std::move(batch_attrs)));
  std::vector<ir::AttrSpec> group_attrs = kEps;
  group_attrs.push_back({"groups", ir::AttrKind::integer, true, "number of channel groups"});
  r.add_builtin(norm("group_norm", "normalize each group of channels per sample", group_norm_signature, 5,
                     std::move(group_attrs)));
  register_batch_norm_parts_ops(r);  // training batch norm in batch-splittable parts
}

}  // namespace loom::ops
