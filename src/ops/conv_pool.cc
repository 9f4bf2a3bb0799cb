// Convolution, pooling and up-sampling over NCHW images. Spatial identifiers are frozen ('^'): a
// split along H or W would need a halo exchange between neighbours, which a box split cannot say.
// Batch and channels stay splittable; a convolution's input channels are a reduction (splitting
// them leaves partial sums, as a row-parallel linear does).
#include <array>

#include "loom/core/checked_math.h"
#include "loom/ops/families.h"

namespace loom::ops {
namespace {

using ir::OpCall;
using ir::OpSignature;
using Pair = std::array<std::int64_t, 2>;

// A per-axis attribute (height, width): [k] means [k, k]; absent means `fallback`.
Expected<Pair> get_pair(const ir::Attrs& attrs, std::string_view op, std::string_view key, Pair fallback,
                        std::int64_t min_value) {
  if (!attrs.contains(key)) return fallback;
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> values, ir::get_int_list(attrs, key));
  if (values.size() != 1 && values.size() != 2)
    return fail(fmt::format("{}: attribute '{}' needs 1 or 2 values (height, width), got {}", op, key, values.size()));
  Pair pair{values.front(), values.back()};
  for (std::int64_t v : pair)
    if (v < min_value) return fail(fmt::format("{}: attribute '{}' must be >= {}, got {}", op, key, min_value, v));
  return pair;
}

// floor((in + 2 pad - dilation (k - 1) - 1) / stride) + 1, as torch.nn.Conv2d / MaxPool2d define it.
Expected<std::int64_t> sliding_output(std::string_view op, std::string_view axis, std::int64_t in, std::int64_t kernel,
                                      std::int64_t stride, std::int64_t pad, std::int64_t dilation) {
  // Attributes are bounded by 2^48 (check_attrs), so only the product can overflow.
  const std::optional<std::int64_t> reach = checked_mul(dilation, kernel - 1);
  const std::int64_t span = reach ? in + 2 * pad - *reach - 1 : -1;
  if (span < 0)
    return fail(fmt::format("{}: output {} would be <= 0 (input {}, kernel {}, stride {}, padding {}, dilation {})", op,
                            axis, in, kernel, stride, pad, dilation),
                "use a smaller kernel or more padding, or a larger input");
  return span / stride + 1;
}

Expected<void> expect_image(std::string_view op, const OpCall& call, std::size_t min_inputs, std::size_t max_inputs) {
  if (call.input_shapes.size() < min_inputs || call.input_shapes.size() > max_inputs)
    return fail(fmt::format("{} takes {} to {} inputs, got {}", op, min_inputs, max_inputs, call.input_shapes.size()));
  if (call.input_shapes[0].rank() != 4)
    return fail(fmt::format("{} needs an image [n c h w], got {}", op, call.input_shapes[0].to_string()),
                "add a batch dimension of 1");
  return {};
}

Expected<OpSignature> conv2d_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_image("conv2d", call, 2, 3));
  const ir::Shape& x = call.input_shapes[0];
  const ir::Shape& w = call.input_shapes[1];
  if (w.rank() != 4) return fail(fmt::format("conv2d: weight must be [co ci/groups kh kw], got {}", w.to_string()));
  LOOM_ASSIGN_OR_RETURN(Pair stride, get_pair(call.attrs, "conv2d", "stride", {1, 1}, 1));
  LOOM_ASSIGN_OR_RETURN(Pair padding, get_pair(call.attrs, "conv2d", "padding", {0, 0}, 0));
  LOOM_ASSIGN_OR_RETURN(Pair dilation, get_pair(call.attrs, "conv2d", "dilation", {1, 1}, 1));
  LOOM_ASSIGN_OR_RETURN(std::int64_t groups, ir::get_int_or(call.attrs, "groups", 1));
  if (groups < 1 || x[1] % groups != 0 || w[0] % groups != 0)
    return fail(fmt::format("conv2d: groups {} must divide input channels {} and output channels {}", groups, x[1], w[0]));
  if (w[1] * groups != x[1])
    return fail(fmt::format("conv2d: input has {} channels, weight {} expects {} (= {} per group x {} groups)", x[1],
                            w.to_string(), w[1] * groups, w[1], groups),
                "the weight's dim 1 is input channels / groups");
  LOOM_ASSIGN_OR_RETURN(std::int64_t oh, sliding_output("conv2d", "height", x[2], w[2], stride[0], padding[0], dilation[0]));
  LOOM_ASSIGN_OR_RETURN(std::int64_t ow, sliding_output("conv2d", "width", x[3], w[3], stride[1], padding[1], dilation[1]));
  const bool bias = call.input_shapes.size() == 3;
  if (groups == 1)
    return OpSignature{bias ? "n ci+ h^ w^, co ci+ kh^ kw^, co -> n co oh^ ow^" : "n ci+ h^ w^, co ci+ kh^ kw^ -> n co oh^ ow^",
                       {{"oh", oh}, {"ow", ow}}, {}};
  // Grouped: channels are (group, channel-in-group); splitting the group splits both sides alike.
  return OpSignature{bias ? "n (g cig^) h^ w^, (g cog) cig^ kh^ kw^, (g cog) -> n (g cog) oh^ ow^"
                          : "n (g cig^) h^ w^, (g cog) cig^ kh^ kw^ -> n (g cog) oh^ ow^",
                     {{"g", groups}, {"oh", oh}, {"ow", ow}}, {}};
}

// 2 n co oh ow (ci/groups) kh kw multiply-adds, plus one add per output for the bias.
double conv2d_flops(const ir::OpInstance& op) {
  const ir::Shape& w = op.inputs[1];
  const double outputs = static_cast<double>(op.outputs[0].numel());
  return 2.0 * outputs * static_cast<double>(w[1] * w[2] * w[3]) + (op.inputs.size() == 3 ? outputs : 0.0);
}

// torch.nn.ConvTranspose2d, weight [ci co kh kw]: the gradient of a conv2d, used for UNet up-sampling.
Expected<OpSignature> conv_transpose2d_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_image("conv_transpose2d", call, 2, 3));
  const ir::Shape& x = call.input_shapes[0];
  const ir::Shape& w = call.input_shapes[1];
  if (w.rank() != 4) return fail(fmt::format("conv_transpose2d: weight must be [ci co kh kw], got {}", w.to_string()));
  if (w[0] != x[1])
    return fail(fmt::format("conv_transpose2d: input has {} channels, weight {} expects {}", x[1], w.to_string(), w[0]));
  LOOM_ASSIGN_OR_RETURN(Pair stride, get_pair(call.attrs, "conv_transpose2d", "stride", {1, 1}, 1));
  LOOM_ASSIGN_OR_RETURN(Pair padding, get_pair(call.attrs, "conv_transpose2d", "padding", {0, 0}, 0));
  LOOM_ASSIGN_OR_RETURN(Pair extra, get_pair(call.attrs, "conv_transpose2d", "output_padding", {0, 0}, 0));
  LOOM_ASSIGN_OR_RETURN(Pair dilation, get_pair(call.attrs, "conv_transpose2d", "dilation", {1, 1}, 1));
  Pair out{};
  for (std::size_t a = 0; a < 2; ++a) {
    if (extra[a] >= stride[a] && extra[a] >= dilation[a])
      return fail(fmt::format("conv_transpose2d: output_padding {} must be smaller than stride {} or dilation {}",
                              extra[a], stride[a], dilation[a]));
    const auto grown = checked_mul(x[2 + a] - 1, stride[a]), reach = checked_mul(dilation[a], w[2 + a] - 1);
    if (!grown || !reach || *grown > ir::kMaxElements || *reach > ir::kMaxElements)
      return fail(fmt::format("conv_transpose2d: stride {} or dilation {} makes the output too large", stride[a], dilation[a]));
    out[a] = *grown - 2 * padding[a] + *reach + extra[a] + 1;
    if (out[a] <= 0)
      return fail(fmt::format("conv_transpose2d: output {} would be {} (<= 0)", a == 0 ? "height" : "width", out[a]),
                  "use less padding");
  }
  return OpSignature{call.input_shapes.size() == 3 ? "n ci+ h^ w^, ci+ co kh^ kw^, co -> n co oh^ ow^"
                                                   : "n ci+ h^ w^, ci+ co kh^ kw^ -> n co oh^ ow^",
                     {{"oh", out[0]}, {"ow", out[1]}}, {}};
}

// Every input pixel scatters into co kh kw outputs: 2 n ci h w co kh kw, plus the bias.
double conv_transpose2d_flops(const ir::OpInstance& op) {
  const ir::Shape& w = op.inputs[1];
  const double scatter = 2.0 * static_cast<double>(op.inputs[0].numel()) * static_cast<double>(w[1] * w[2] * w[3]);
  return scatter + (op.inputs.size() == 3 ? static_cast<double>(op.outputs[0].numel()) : 0.0);
}

// Max and average pooling: torch defaults (stride = kernel, padding 0); padding at most half the kernel.
ir::SignatureFn pool_signature(std::string op) {
  return [op](const OpCall& call) -> Expected<OpSignature> {
    LOOM_RETURN_IF_ERROR(expect_image(op, call, 1, 1));
    const ir::Shape& x = call.input_shapes[0];
    LOOM_ASSIGN_OR_RETURN(Pair kernel, get_pair(call.attrs, op, "kernel", {0, 0}, 1));
    LOOM_ASSIGN_OR_RETURN(Pair stride, get_pair(call.attrs, op, "stride", kernel, 1));
    LOOM_ASSIGN_OR_RETURN(Pair padding, get_pair(call.attrs, op, "padding", {0, 0}, 0));
    Pair out{};
    for (std::size_t a = 0; a < 2; ++a) {
      if (2 * padding[a] > kernel[a])
        return fail(fmt::format("{}: padding {} exceeds half the kernel {}", op, padding[a], kernel[a]));
      LOOM_ASSIGN_OR_RETURN(out[a], sliding_output(op, a == 0 ? "height" : "width", x[2 + a], kernel[a], stride[a],
                                                   padding[a], 1));
    }
    return OpSignature{"n c h^ w^ -> n c oh^ ow^", {{"oh", out[0]}, {"ow", out[1]}}, {}};
  };
}

// One comparison or add per window element.
double pool_flops(const ir::OpInstance& op) {
  Pair kernel{1, 1};
  if (auto k = get_pair(op.attrs, "pool", "kernel", {1, 1}, 1)) kernel = *k;
  return static_cast<double>(op.outputs[0].numel()) * static_cast<double>(kernel[0] * kernel[1]);
}

Expected<OpSignature> adaptive_avg_pool2d_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_image("adaptive_avg_pool2d", call, 1, 1));
  LOOM_ASSIGN_OR_RETURN(Pair out, get_pair(call.attrs, "adaptive_avg_pool2d", "output_size", {0, 0}, 1));
  const ir::Shape& x = call.input_shapes[0];
  if (out[0] > x[2] || out[1] > x[3])
    return fail(fmt::format("adaptive_avg_pool2d: output {}x{} is larger than the input {}x{}", out[0], out[1], x[2], x[3]));
  return OpSignature{"n c h^ w^ -> n c oh^ ow^", {{"oh", out[0]}, {"ow", out[1]}}, {}};
}

Expected<OpSignature> upsample_nearest2d_signature(const OpCall& call) {
  LOOM_RETURN_IF_ERROR(expect_image("upsample_nearest2d", call, 1, 1));
  LOOM_ASSIGN_OR_RETURN(std::int64_t scale, ir::get_int(call.attrs, "scale"));
  if (scale < 1) return fail(fmt::format("upsample_nearest2d: scale must be >= 1, got {}", scale));
  const ir::Shape& x = call.input_shapes[0];
  const auto oh = checked_mul(x[2], scale), ow = checked_mul(x[3], scale);
  if (!oh || !ow) return fail(fmt::format("upsample_nearest2d: scale {} makes {} too large", scale, x.to_string()));
  return OpSignature{"n c h^ w^ -> n c oh^ ow^", {{"oh", *oh}, {"ow", *ow}}, {}};
}

}  // namespace

void register_conv_pool_ops(OpRegistry& r) {
  const auto pair_attr = [](std::string name, bool required, std::string doc) {
    return ir::AttrSpec{std::move(name), ir::AttrKind::int_list, required, std::move(doc)};
  };
  r.add_builtin({.type = "conv2d",
                 .family = "conv_pool",
                 .summary = "2-D convolution, x [n ci h w], weight [co ci/groups kh kw], optional bias [co]",
                 .op_class = ir::OpClass::convolution,
                 .attrs = {pair_attr("stride", false, "[s] or [sh, sw], default 1"),
                           pair_attr("padding", false, "[p] or [ph, pw], default 0"),
                           pair_attr("dilation", false, "[d] or [dh, dw], default 1"),
                           {"groups", ir::AttrKind::integer, false, "default 1"}},
                 .signature = conv2d_signature,
                 .flops = conv2d_flops,
                 .additive_inputs = {2}});
  r.add_builtin({.type = "conv_transpose2d",
                 .family = "conv_pool",
                 .summary = "2-D transposed convolution, x [n ci h w], weight [ci co kh kw], optional bias [co]",
                 .op_class = ir::OpClass::convolution,
                 .attrs = {pair_attr("stride", false, "[s] or [sh, sw], default 1"),
                           pair_attr("padding", false, "[p] or [ph, pw], default 0"),
                           pair_attr("output_padding", false, "[p] or [ph, pw], default 0"),
                           pair_attr("dilation", false, "[d] or [dh, dw], default 1")},
                 .signature = conv_transpose2d_signature,
                 .flops = conv_transpose2d_flops,
                 .additive_inputs = {2}});
  const std::vector<ir::AttrSpec> pool_attrs = {pair_attr("kernel", true, "[k] or [kh, kw]"),
                                                pair_attr("stride", false, "default: the kernel"),
                                                pair_attr("padding", false, "default 0")};
  // Backward of a max pool routes each gradient to the argmax it saved: about one op per output.
  r.add_builtin({.type = "max_pool2d",
                 .family = "conv_pool",
                 .summary = "2-D max pooling over [n c h w]",
                 .op_class = ir::OpClass::reduction,
                 .attrs = pool_attrs,
                 .signature = pool_signature("max_pool2d"),
                 .flops = pool_flops,
                 .backward = {.saves_outputs = true, .flops_factor = 1.0}});
  r.add_builtin({.type = "avg_pool2d",
                 .family = "conv_pool",
                 .summary = "2-D average pooling over [n c h w]",
                 .op_class = ir::OpClass::reduction,
                 .attrs = pool_attrs,
                 .signature = pool_signature("avg_pool2d"),
                 .flops = pool_flops,
                 .backward = {.saves_inputs = false, .flops_factor = 1.0}});
  r.add_builtin({.type = "adaptive_avg_pool2d",
                 .family = "conv_pool",
                 .summary = "average pooling to a fixed output size (global pooling with [1, 1])",
                 .op_class = ir::OpClass::reduction,
                 .attrs = {pair_attr("output_size", true, "[s] or [oh, ow]")},
                 .signature = adaptive_avg_pool2d_signature,
                 .flops = ir::flops_per_input_element(1.0),  // every input element is summed once
                 .backward = {.saves_inputs = false, .flops_factor = 1.0}});
  r.add_builtin({.type = "upsample_nearest2d",
                 .family = "conv_pool",
                 .summary = "nearest-neighbour up-sampling of [n c h w] by an integer scale",
                 .op_class = ir::OpClass::data_movement,
                 .attrs = {{"scale", ir::AttrKind::integer, true, "integer factor for height and width"}},
                 .signature = upsample_nearest2d_signature,
                 .flops = ir::no_flops(),
                 .backward = {.saves_inputs = false, .flops_factor = 0.0}});
}

}  // namespace loom::ops
