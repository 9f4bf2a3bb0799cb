// Bilinear resizing of images (F.interpolate mode "bilinear": MobileViT's patch grid, PVT's position
// embeddings). Each output pixel blends four input pixels anywhere in the plane, so height and width
// are frozen; batch and channels split freely.
#include "loom/ops/families.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

Expected<OpSignature> upsample_bilinear2d_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_inputs(call, 1, 1, "upsample_bilinear2d", "one input (x)"));
  LOOM_RETURN_IF_ERROR(expect_rank(call, 0, 4, "upsample_bilinear2d", "[n, c, h, w]"));
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> size, ir::get_int_list(call.attrs, "output_size"));
  if (size.size() != 2 || size[0] < 1 || size[1] < 1)
    return fail(fmt::format("upsample_bilinear2d: 'output_size' must be two positive sizes [oh, ow], got {}",
                            ir::to_string(call.attrs.at("output_size"))));
  return OpSignature{"n c h^ w^ -> n c oh^ ow^", {{"oh", size[0]}, {"ow", size[1]}}, {}};
}

}  // namespace

void register_resample_ops(OpRegistry& r) {
  r.add_builtin({.type = "upsample_bilinear2d",
                 .family = "resample",
                 .summary = "bilinear resizing of [n c h w] to [n c oh ow] (up or down, torch's pixel centres)",
                 .op_class = ir::OpClass::elementwise,
                 .attrs = {{"output_size", ir::AttrKind::int_list, true, "[oh, ow]"},
                           {"align_corners", ir::AttrKind::boolean, false, "map corner pixels onto each other, default false"}},
                 .signature = upsample_bilinear2d_signature,
                 .flops = ir::flops_per_output_element(7),  // four weighted reads: 4 multiplies, 3 adds
                 // The backward scatters each gradient back with the same weights: shapes suffice.
                 .backward = {.saves_inputs = false, .flops_factor = 1.0}});
}

}  // namespace loom::ops
