// Swin Transformer's data movement (Liu et al. 2021): windows, shifts, patch merging and the relative
// position bias gather. Images here are channels-last [b H W c], as Swin keeps them between blocks.
//
// Windowed attention runs on [b·nW, ws², c]: the window index folds into the batch, so window
// attention is ordinary batched attention. The batch stays splittable (it is the first atom of the
// folded dim); H and W are frozen wherever a window or a shift couples neighbouring pixels.
#include "loom/ops/families.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;

Expected<std::int64_t> window_size(std::string_view op, const ir::Attrs& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t ws, ir::get_int(attrs, "window_size"));
  if (ws < 1) return fail(fmt::format("{}: window_size must be >= 1, got {}", op, ws));
  return ws;
}

Expected<void> expect_windowable(std::string_view op, std::int64_t height, std::int64_t width, std::int64_t ws) {
  if (height % ws != 0 || width % ws != 0)
    return fail(fmt::format("{}: window size {} does not divide the {}x{} feature map", op, ws, height, width),
                "pad the image, or pick a window size dividing the resolution at every stage");
  return {};
}

Expected<void> expect_rank(std::string_view op, const OpCall& call, std::size_t rank, std::string_view layout) {
  if (call.input_shapes.size() != 1) return fail(fmt::format("{} takes one input, got {}", op, call.input_shapes.size()));
  if (call.input_shapes[0].rank() != rank)
    return fail(fmt::format("{} needs {}, got {}", op, layout, call.input_shapes[0].to_string()));
  return {};
}

// [b H W c] -> [b·nH·nW, ws·ws, c], windows in row-major order (torch: view, permute, reshape).
Expected<OpSignature> window_partition_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_rank("window_partition", call, 4, "[b H W c]"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t ws, window_size("window_partition", call.attrs));
  const ir::Shape& x = call.input_shapes[0];
  LOOM_RETURN_IF_ERROR(expect_windowable("window_partition", x[1], x[2], ws));
  return OpSignature{"b (nh^ wh^) (nw^ ww^) c -> (b nh^ nw^) (wh^ ww^) c", {{"wh", ws}, {"ww", ws}}, {}};
}

// The inverse; the input cannot tell how the folded batch splits, so height and width are attributes.
Expected<OpSignature> window_reverse_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_rank("window_reverse", call, 3, "windows [b·nW ws² c]"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t ws, window_size("window_reverse", call.attrs));
  LOOM_ASSIGN_OR_RETURN(std::int64_t height, ir::get_int(call.attrs, "height"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t width, ir::get_int(call.attrs, "width"));
  if (height < 1 || width < 1) return fail(fmt::format("window_reverse: height {} and width {} must be >= 1", height, width));
  LOOM_RETURN_IF_ERROR(expect_windowable("window_reverse", height, width, ws));
  const std::int64_t windows = (height / ws) * (width / ws);
  if (call.input_shapes[0][0] % windows != 0)
    return fail(fmt::format("window_reverse: {} windows are not a whole number of {}x{} images ({} windows each)",
                            call.input_shapes[0][0], height, width, windows));
  return OpSignature{"(b nh^ nw^) (wh^ ww^) c -> b (nh^ wh^) (nw^ ww^) c",
                     {{"nh", height / ws}, {"nw", width / ws}, {"wh", ws}, {"ww", ws}},
                     {}};
}

// [b H W c] -> [b H/2 W/2 4c]. Channels come out as (c, 2x2 offset) rather than Swin's concat order
// (offset, c): a fixed permutation the following linear reduction absorbs, and it keeps c the
// leading, splittable atom. Each output reads only its own 2x2 block, so H and W may be split.
Expected<OpSignature> patch_merging_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_rank("patch_merging", call, 4, "[b H W c]"));
  const ir::Shape& x = call.input_shapes[0];
  if (x[1] % 2 != 0 || x[2] % 2 != 0)
    return fail(fmt::format("patch_merging: the {}x{} feature map must have even sides", x[1], x[2]));
  return OpSignature{"b (h 2) (w 2) c -> b h w (c 4)", {}, {}};
}

// torch.roll over H and W: every output pixel may come from the far edge, so H and W are frozen.
Expected<OpSignature> cyclic_shift_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_rank("cyclic_shift", call, 4, "[b H W c]"));
  LOOM_RETURN_IF_ERROR(ir::get_int(call.attrs, "shift"));
  return OpSignature{"b h^ w^ c -> b h^ w^ c", {}, {}};
}

// Gathers the learned table [(2ws-1)², heads] into the additive attention bias [heads, ws², ws²]
// (Liu et al. 2021, Sec. 3.2). Heads stay splittable, matching head-parallel attention.
Expected<OpSignature> relative_position_bias_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_rank("relative_position_bias", call, 2, "a table [(2ws-1)^2 heads]"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t ws, window_size("relative_position_bias", call.attrs));
  const std::int64_t entries = (2 * ws - 1) * (2 * ws - 1);
  if (call.input_shapes[0][0] != entries)
    return fail(fmt::format("relative_position_bias: window size {} needs a table of {} rows, got {}", ws, entries,
                            call.input_shapes[0].to_string()));
  return OpSignature{"t^ h -> h q^ k^", {{"q", ws * ws}, {"k", ws * ws}}, {}};
}

}  // namespace

void register_swin_ops(OpRegistry& r) {
  const ir::AttrSpec window{"window_size", ir::AttrKind::integer, true, "window side in tokens (Swin: 7; 12 or 24 at high resolution)"};
  r.add_builtin({.type = "window_partition",
                 .family = "swin",
                 .summary = "[b H W c] -> windows [b*nW, ws*ws, c]",
                 .op_class = ir::OpClass::data_movement,
                 .attrs = {window},
                 .signature = window_partition_signature,
                 .flops = ir::no_flops(),
                 .backward = {.saves_inputs = false}});
  r.add_builtin({.type = "window_reverse",
                 .family = "swin",
                 .summary = "windows [b*nW, ws*ws, c] -> [b H W c]",
                 .op_class = ir::OpClass::data_movement,
                 .attrs = {window,
                           {"height", ir::AttrKind::integer, true, "feature-map height H"},
                           {"width", ir::AttrKind::integer, true, "feature-map width W"}},
                 .signature = window_reverse_signature,
                 .flops = ir::no_flops(),
                 .backward = {.saves_inputs = false}});
  r.add_builtin({.type = "patch_merging",
                 .family = "swin",
                 .summary = "gather 2x2 neighbours: [b H W c] -> [b H/2 W/2 4c] (the reduction is a separate linear)",
                 .op_class = ir::OpClass::data_movement,
                 .signature = patch_merging_signature,
                 .flops = ir::no_flops(),
                 .backward = {.saves_inputs = false}});
  r.add_builtin({.type = "cyclic_shift",
                 .family = "swin",
                 .summary = "roll [b H W c] by `shift` pixels along H and W (shifted windows)",
                 .op_class = ir::OpClass::data_movement,
                 .attrs = {{"shift", ir::AttrKind::integer, true, "signed; -ws/2 before shifted attention, +ws/2 after"}},
                 .signature = cyclic_shift_signature,
                 .flops = ir::no_flops(),
                 .backward = {.saves_inputs = false}});
  r.add_builtin({.type = "relative_position_bias",
                 .family = "swin",
                 .summary = "gather the relative-position table [(2ws-1)^2, heads] into a bias [heads, ws^2, ws^2]",
                 .op_class = ir::OpClass::embedding,
                 .attrs = {window},
                 .signature = relative_position_bias_signature,
                 .flops = ir::no_flops(),
                 .backward = {.saves_inputs = false}});
}

}  // namespace loom::ops
