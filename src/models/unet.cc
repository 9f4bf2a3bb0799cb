// UNet (Ronneberger et al. 2015), Rhino's "UNet 33M" (Rhino Table 3, batch 16 per device). Rhino gives
// no configuration; this is the classic one: base width 64 doubling over four down-sampling levels
// (64..1024), each level two 3x3 conv + batch norm + ReLU, 2x2 transposed-conv up-sampling with skip
// concatenation, 1x1 output conv. Predicting a 3-channel image with an MSE loss, as a diffusion
// denoiser does (Rhino cites UNet as diffusion models' core). 31.04M parameters (Rhino says 33M);
// 256x256 images by default (the side must be a multiple of 16).
#include "loom/ir/graph_builder.h"
#include "loom/models/families.h"
#include "loom/models/transformer_blocks.h"

namespace loom::models {
namespace {

using ir::GraphBuilder;
using ir::TensorId;
using IntList = std::vector<std::int64_t>;

constexpr std::int64_t kLevels = 4;
constexpr std::int64_t kImageChannels = 3;

struct UNetConfig {
  std::int64_t base = 64;  // level-0 width, doubling per level
  std::int64_t batch = 16;
  std::int64_t image = 256;
};

// The verification-sized UNet (ModelOptions::shrink): all four levels, widths 2 .. 32.
UNetConfig shrink(UNetConfig config) {
  config.base = 2;
  config.batch = 4;
  config.image = 16;  // the smallest side four 2x2 pools allow
  return config;
}

TensorId conv_bn_relu(GraphBuilder& b, const std::string& name, TensorId x, std::int64_t out, ir::DType dt) {
  if (!b.ok()) return {};
  const std::int64_t in = b.shape(x)[1];
  auto scope = b.scope(name);
  TensorId y = b.op("conv2d", "conv", {x, b.parameter("conv.weight", {out, in, 3, 3}, dt)}, {{"padding", IntList{1}}});
  y = b.op("batch_norm", "bn", {y, b.parameter("bn.weight", {out}, dt), b.parameter("bn.bias", {out}, dt)});
  return b.op("relu", "relu", {y});
}

TensorId double_conv(GraphBuilder& b, TensorId x, std::int64_t out, ir::DType dt) {
  return conv_bn_relu(b, "conv_b", conv_bn_relu(b, "conv_a", x, out, dt), out, dt);
}

Expected<ir::Graph> build_unet(const std::string& name, const UNetConfig& preset, const ModelOptions& options,
                               const ir::OpCatalog& catalog) {
  const UNetConfig config = options.shrink ? shrink(preset) : preset;
  const std::int64_t batch = options.batch > 0 ? options.batch : config.batch;
  const std::int64_t side = options.seq > 0 ? options.seq : config.image;
  if (options.layers > 0) return fail(fmt::format("{}: the UNet's depth is fixed; 'layers' cannot be overridden", name));
  if (side % (1 << kLevels) != 0)
    return fail(fmt::format("{}: image side {} must be a multiple of {}", name, side, 1 << kLevels));
  const ir::DType dt = options.dtype;
  GraphBuilder b(name, catalog);
  TensorId x = b.input("images", {batch, kImageChannels, side, side}, dt);
  TensorId target = b.input("target", {batch, kImageChannels, side, side}, dt);
  std::vector<TensorId> skips;
  for (std::int64_t level = 0; level <= kLevels; ++level) {
    auto scope = b.scope(fmt::format("down{}", level));
    if (level > 0) x = b.op("max_pool2d", "pool", {x}, {{"kernel", IntList{2}}});
    x = double_conv(b, x, config.base << level, dt);
    if (level < kLevels) skips.push_back(x);
  }
  for (std::int64_t level = kLevels - 1; level >= 0; --level) {
    auto scope = b.scope(fmt::format("up{}", level));
    const std::int64_t out = config.base << level;
    TensorId w = b.parameter("up.weight", {2 * out, out, 2, 2}, dt);
    x = b.op("conv_transpose2d", "up", {x, w, b.parameter("up.bias", {out}, dt)}, {{"stride", IntList{2}}});
    x = b.op("concat", "skip", {skips[static_cast<std::size_t>(level)], x}, {{"dim", std::int64_t{1}}});
    x = double_conv(b, x, out, dt);
  }
  TensorId w = b.parameter("head.weight", {kImageChannels, config.base, 1, 1}, dt);
  TensorId pred = b.op("conv2d", "head", {x, w, b.parameter("head.bias", {kImageChannels}, dt)});
  b.set_loss(b.op("mse_loss", "loss", {pred, target}));
  return std::move(b).finish();
}

}  // namespace

ModelFamily unet_family() {
  return {
      .name = "unet",
      .summary = "UNet: four down-sampling levels of two conv + batch norm + ReLU, transposed-conv up-sampling with "
                 "skips, MSE loss",
      .fields = {{SpecField::channels, "level-0 width (doubling per level)", "64"},
                 {SpecField::seq, "image side (a multiple of 16)", "256"},
                 {SpecField::batch, "global batch (images)", "16"}},
      .make = [](const ModelSpec& spec, FieldNaming) -> Expected<ModelPreset> {
        const UNetConfig config{.base = or_default(spec.channels, 64),
                                .batch = or_default(spec.batch, 16),
                                .image = or_default(spec.seq, 256)};
        ModelPreset p{.name = spec.name,
                      .family = "unet",
                      .description = !spec.source.empty()
                                         ? spec.source
                                         : fmt::format("UNet, base {}, 4 levels, {}x{}", config.base, config.image,
                                                       config.image),
                      .nominal_params = spec.nominal_params,
                      .default_batch = config.batch,
                      .default_seq = config.image};
        p.build = [name = spec.name, config](const ModelOptions& options, const ir::OpCatalog& catalog) {
          return build_unet(name, config, options, catalog);
        };
        return p;
      },
      .presets = {{.family = "unet",
                   .name = "unet-33m",
                   .source = "UNet (Ronneberger et al. 2015), base 64, 4 levels, 256x256 (Rhino Table 3: 33M)",
                   .nominal_params = 33e6,
                   .seq = 256,
                   .batch = 16,
                   .channels = 64}},
  };
}

}  // namespace loom::models
