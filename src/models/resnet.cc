// ResNet (He et al. 2016) and Wide-ResNet as Rhino benchmarks it (Rhino Table 4, following Alpa's
// wide_resnet: the bottleneck's 3x3 conv widened by `width_factor`, stage widths channels·2^i).
// NCHW images, 224x224 ImageNet by default; batch norm after every conv; a 1000-class head.
#include <algorithm>

#include "loom/models/families.h"
#include "loom/ir/graph_builder.h"
#include "loom/models/transformer_blocks.h"

namespace loom::models {
namespace {

using ir::GraphBuilder;
using ir::TensorId;

struct ResNetConfig {
  std::int64_t channels = 64;      // stem and first-stage width (Rhino's N_channels)
  std::int64_t width_factor = 1;   // widening of the 3x3 conv (1: plain ResNet)
  std::vector<std::int64_t> blocks;  // bottleneck blocks per stage
  std::int64_t classes = 1000;
  std::int64_t image = 224;  // default image side
  std::int64_t batch = 256;  // default batch
};

// The verification-sized ResNet (ModelOptions::shrink): two stages, the first with a projection-shortcut
// block and an identity-shortcut block, the second with a strided projection block: every block kind.
ResNetConfig shrink(ResNetConfig config) {
  config.channels = 4;  // stage widths 4 and 8, bottleneck outputs 16 and 32
  // Wide-ResNets stay wide (their 3x3 conv widened 2x) without Wide-ResNet-101's 12x.
  config.width_factor = std::min<std::int64_t>(config.width_factor, 2);
  config.blocks = {2, 1};
  config.classes = 16;
  config.image = 32;  // stem and max pool: 8x8 maps in stage 1, 4x4 in stage 2
  config.batch = 4;
  return config;
}

using IntList = std::vector<std::int64_t>;

// conv (no bias) then batch norm, optionally relu; ops "<name>.conv", "<name>.bn", "<name>.relu".
TensorId conv_bn(GraphBuilder& b, const std::string& name, TensorId x, std::int64_t out, std::int64_t kernel,
                 std::int64_t stride, bool relu, ir::DType dtype) {
  if (!b.ok()) return {};
  const std::int64_t in = b.shape(x)[1];
  TensorId w = b.parameter(name + ".conv.weight", {out, in, kernel, kernel}, dtype);
  TensorId y = b.op("conv2d", name + ".conv", {x, w}, {{"stride", IntList{stride}}, {"padding", IntList{kernel / 2}}});
  y = b.op("batch_norm", name + ".bn",
           {y, b.parameter(name + ".bn.weight", {out}, dtype), b.parameter(name + ".bn.bias", {out}, dtype)});
  return relu ? b.op("relu", name + ".relu", {y}) : y;
}

// 1x1 reduce, 3x3 (strided, widened), 1x1 expand to 4·width; projection shortcut when shapes change.
TensorId bottleneck(GraphBuilder& b, TensorId x, std::int64_t width, std::int64_t width_factor, std::int64_t stride,
                    ir::DType dtype) {
  if (!b.ok()) return {};
  const std::int64_t in = b.shape(x)[1];
  TensorId y = conv_bn(b, "conv1", x, width, 1, 1, true, dtype);
  y = conv_bn(b, "conv2", y, width * width_factor, 3, stride, true, dtype);
  y = conv_bn(b, "conv3", y, 4 * width, 1, 1, false, dtype);
  TensorId shortcut = (stride != 1 || in != 4 * width) ? conv_bn(b, "downsample", x, 4 * width, 1, stride, false, dtype) : x;
  return b.op("relu", "relu", {b.op("add", "residual", {y, shortcut})});
}

Expected<ir::Graph> build_resnet(const std::string& name, const ResNetConfig& preset, const ModelOptions& options,
                                 const ir::OpCatalog& catalog) {
  const ResNetConfig config = options.shrink ? shrink(preset) : preset;
  const StepShape step = resolve_step_shape(options, config.batch, config.image, 0);
  if (options.layers > 0)
    return fail(fmt::format("{}: the depth is fixed by the block counts; 'layers' cannot be overridden", name));
  const ir::DType dt = step.dtype;
  GraphBuilder b(name, catalog);
  TensorId x = b.input("images", {step.batch, 3, step.seq, step.seq}, dt);
  TensorId labels = b.input("labels", {step.batch}, ir::DType::i64);
  {
    auto stem = b.scope("stem");
    x = conv_bn(b, "stem", x, config.channels, 7, 2, true, dt);
    x = b.op("max_pool2d", "maxpool", {x}, {{"kernel", IntList{3}}, {"stride", IntList{2}}, {"padding", IntList{1}}});
  }
  for (std::size_t stage = 0; stage < config.blocks.size(); ++stage) {
    const std::int64_t width = config.channels << stage;
    for (std::int64_t block = 0; block < config.blocks[stage]; ++block) {
      auto scope = b.scope(fmt::format("layer{}.{}", stage + 1, block));
      const std::int64_t stride = (stage > 0 && block == 0) ? 2 : 1;
      x = bottleneck(b, x, width, config.width_factor, stride, dt);
    }
  }
  if (!b.ok()) return std::move(b).finish();
  const std::int64_t features = b.shape(x)[1];
  x = b.op("adaptive_avg_pool2d", "avgpool", {x}, {{"output_size", IntList{1}}});
  x = b.op("reshape", "flatten", {x}, {{"shape", IntList{step.batch, features}}});
  TensorId logits = linear(b, "fc", x, features, config.classes, true, dt);
  b.set_loss(b.op("cross_entropy", "loss", {logits, labels}));
  return std::move(b).finish();
}

// Bottleneck blocks per stage of the standard depths (He et al. 2016, Table 1; torchvision's resnet200):
// depth = 3 x blocks + 2.
struct Depth {
  std::int64_t depth;
  std::vector<std::int64_t> blocks;
};
const Depth kDepths[] = {{50, {3, 4, 6, 3}}, {101, {3, 4, 23, 3}}, {152, {3, 8, 36, 3}}, {200, {3, 24, 36, 3}}};

Expected<ModelPreset> make_preset(const ModelSpec& spec, FieldNaming naming) {
  const auto depth = std::ranges::find(kDepths, spec.layers, &Depth::depth);
  if (depth == std::end(kDepths))
    return fail(fmt::format("{} {} is not a bottleneck ResNet depth", field_name(SpecField::layers, naming), spec.layers),
                "give 50, 101, 152 or 200 (3, 4, 6, 3 / 3, 4, 23, 3 / 3, 8, 36, 3 / 3, 24, 36, 3 blocks per stage)");
  const ResNetConfig config{.channels = or_default(spec.channels, 64),
                            .width_factor = or_default(spec.width_factor, 1),
                            .blocks = depth->blocks,
                            .classes = or_default(spec.classes, 1000),
                            .image = or_default(spec.seq, 224),
                            .batch = or_default(spec.batch, 256)};
  const std::string description =
      !spec.source.empty() ? spec.source
                           : fmt::format("ResNet-{}, {} channels, width factor {}", spec.layers, config.channels,
                                         config.width_factor);
  ModelPreset p{.name = spec.name, .family = "resnet", .description = description,
                .nominal_params = spec.nominal_params, .default_batch = config.batch, .default_seq = config.image};
  p.build = [name = spec.name, config](const ModelOptions& options, const ir::OpCatalog& catalog) {
    return build_resnet(name, config, options, catalog);
  };
  return p;
}

ModelSpec resnet(std::string name, const char* source, double nominal, std::int64_t depth, std::int64_t channels,
                 std::int64_t width_factor, std::int64_t batch) {
  return {.family = "resnet", .name = std::move(name), .source = source, .nominal_params = nominal, .layers = depth,
          .seq = 224, .batch = batch, .classes = 1000, .channels = channels, .width_factor = width_factor};
}

}  // namespace

ModelFamily resnet_family() {
  // ImageNet ResNets: 256 images per step (He et al. 2016). Wide-ResNets: Rhino Table 4 keeps a global
  // batch of 4. Rhino names them 1.3B/2.6B/6B/12B; this definition (Alpa's, whose channel and width
  // numbers Rhino's table reuses) counts 1.005B/1.965B/4.000B/9.550B parameters.
  return {
      .name = "resnet",
      .summary = "bottleneck ResNet and Wide-ResNet (NCHW, batch norm), stage widths channels x 2^i",
      .fields = {{SpecField::layers, "depth: 50, 101, 152 or 200", ""},
                 {SpecField::channels, "stem and first-stage width", "64"},
                 {SpecField::width_factor, "widening of the 3x3 convolution (1: plain ResNet)", "1"},
                 {SpecField::classes, "classifier outputs", "1000"},
                 {SpecField::seq, "image side", "224"},
                 {SpecField::batch, "global batch (images)", "256"}},
      .make = make_preset,
      .presets =
          {
              resnet("resnet-50", "ResNet-50 (He et al. 2016), 224x224 ImageNet", 25.6e6, 50, 64, 1, 256),
              resnet("resnet-152", "ResNet-152 (He et al. 2016), 224x224 ImageNet", 60.2e6, 152, 64, 1, 256),
              resnet("wrn-1.3b", "Wide-ResNet-50, 320 channels, width factor 2 (Rhino Table 4)", 1.3e9, 50, 320, 2, 4),
              resnet("wrn-2.6b", "Wide-ResNet-50, 448 channels, width factor 2 (Rhino Table 4)", 2.6e9, 50, 448, 2, 4),
              resnet("wrn-6b", "Wide-ResNet-50, 640 channels, width factor 2 (Rhino Table 4)", 6e9, 50, 640, 2, 4),
              resnet("wrn-12b", "Wide-ResNet-101, 320 channels, width factor 12 (Rhino Table 4)", 12e9, 101, 320, 12,
                     4),
          },
  };
}

}  // namespace loom::models
