// Constant padding (torch.nn.functional.pad, mode "constant"). A padded dim grows, so its input and
// output are different identifiers, both frozen: a shard would need to know where it sits to pad
// only the outer edges. Unpadded dims pass through and split freely.
#include "loom/core/checked_math.h"
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

Expected<OpSignature> pad_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "pad", "one input (x)"));
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> pads, ir::get_int_list(call.attrs, "pads"));
  const ir::Shape& x = call.input_shapes[0];
  if (pads.empty() || pads.size() % 2 != 0 || pads.size() / 2 > x.rank())
    return fail(fmt::format("pad: 'pads' has {} values for x {}", pads.size(), x.to_string()),
                "give (before, after) pairs, last dim first, for at most every dim of x (torch's order)");
  for (std::int64_t p : pads)
    if (p < 0) return fail(fmt::format("pad: negative padding {} (cropping) is not supported", p), "slice x instead");
  TensorDims in = indexed_dims(x.rank()), out = in;
  ir::SizeMap sizes;
  for (std::size_t pair = 0; pair < pads.size() / 2; ++pair) {
    const std::size_t axis = x.rank() - 1 - pair;
    const std::int64_t before = pads[2 * pair], after = pads[2 * pair + 1];
    if (before == 0 && after == 0) continue;
    const auto grown = checked_add(x[axis], before + after);
    if (!grown) return fail(fmt::format("pad: padding makes dim {} of {} too large", axis, x.to_string()));
    in[axis] += '^';
    out[axis] = fmt::format("p{}^", axis);
    sizes[fmt::format("p{}", axis)] = *grown;
  }
  return OpSignature{annotation_text({in}, {out}), std::move(sizes), {}};
}

}  // namespace

void register_padding_ops(OpRegistry& r) {
  r.add_builtin({.type = "pad",
                 .family = "padding",
                 .summary = "x with a constant border: (before, after) per dim, last dim first (F.pad)",
                 .op_class = ir::OpClass::data_movement,
                 .attrs = {{"pads", ir::AttrKind::int_list, true, "(before, after) pairs, last dim first"},
                           {"value", ir::AttrKind::real, false, "the fill value, default 0"}},
                 .signature = pad_signature,
                 .flops = ir::no_flops(),
                 // The gradient is the output gradient's interior: nothing saved.
                 .backward = {.saves_inputs = false, .flops_factor = 0.0}});
}

}  // namespace loom::ops
