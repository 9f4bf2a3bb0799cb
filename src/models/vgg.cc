// VGG19 (Simonyan & Zisserman 2015, configuration E): 16 3x3 convolutions with bias and ReLU, five
// max pools, three fully connected layers (25088 -> 4096 -> 4096 -> classes) on 224x224 images.
// Rhino (Sec. 7.4, Table 3) replaces the last layer with a million-class classifier: 4096 x 10^6
// weights dominate, 4.24B parameters in all; batch 128 per device.
#include "loom/ir/graph_builder.h"
#include "loom/models/families.h"
#include "loom/models/transformer_blocks.h"

namespace loom::models {
namespace {

using ir::GraphBuilder;
using ir::TensorId;
using IntList = std::vector<std::int64_t>;

constexpr std::int64_t kPool = 0;  // a max pool in the layer list
const IntList kVgg19Layers = {64, 64, kPool, 128, 128, kPool, 256, 256, 256, 256, kPool,
                              512, 512, 512, 512, kPool, 512, 512, 512, 512, kPool};

struct VggConfig {
  std::int64_t classes = 1000;
  std::int64_t batch = 256;
  std::int64_t image = 224;
  std::int64_t width_divisor = 1;  // conv widths are kVgg19Layers / width_divisor
  std::int64_t fc = 4096;          // width of the two hidden classifier layers
};

// The verification-sized VGG19 (ModelOptions::shrink): all 16 convolutions and 5 pools, narrow.
VggConfig shrink(VggConfig config) {
  config.width_divisor = 32;  // conv widths 2 .. 16
  config.fc = 16;
  // The million-class classifier stays the largest layer (64 classes against the ImageNet model's 16).
  config.classes = config.classes > 1000 ? 64 : 16;
  config.image = 32;          // five 2x2 pools down to 1x1
  config.batch = 4;
  return config;
}

Expected<ir::Graph> build_vgg19(const std::string& name, const VggConfig& preset, const ModelOptions& options,
                                const ir::OpCatalog& catalog) {
  const VggConfig config = options.shrink ? shrink(preset) : preset;
  const StepShape step = resolve_step_shape(options, config.batch, config.image, 0);
  if (options.layers > 0) return fail(fmt::format("{}: VGG19's depth is fixed; 'layers' cannot be overridden", name));
  if (step.seq % 32 != 0)
    return fail(fmt::format("{}: image side {} must be a multiple of 32 (five 2x2 pools)", name, step.seq));
  const ir::DType dt = step.dtype;
  GraphBuilder b(name, catalog);
  TensorId x = b.input("images", {step.batch, 3, step.seq, step.seq}, dt);
  TensorId labels = b.input("labels", {step.batch}, ir::DType::i64);
  std::int64_t channels = 3, conv = 0, pool = 0;
  for (std::int64_t width : kVgg19Layers) {
    const std::int64_t out = width / config.width_divisor;
    if (width == kPool) {
      x = b.op("max_pool2d", fmt::format("features.pool{}", pool++), {x}, {{"kernel", IntList{2}}});
      continue;
    }
    auto scope = b.scope(fmt::format("features.conv{}", conv++));
    TensorId w = b.parameter("weight", {out, channels, 3, 3}, dt);
    TensorId bias = b.parameter("bias", {out}, dt);
    x = b.op("relu", "relu", {b.op("conv2d", "conv", {x, w, bias}, {{"padding", IntList{1}}})});
    channels = out;
  }
  if (!b.ok()) return std::move(b).finish();
  // torchvision pools adaptively to 7x7 first; at 224 the feature map is already 7x7.
  const std::int64_t side = b.shape(x)[2];
  const std::int64_t flat = channels * side * side;
  x = b.op("reshape", "flatten", {x}, {{"shape", IntList{step.batch, flat}}});
  x = b.op("relu", "classifier.relu0", {linear(b, "classifier.fc0", x, flat, config.fc, true, dt)});
  x = b.op("relu", "classifier.relu1", {linear(b, "classifier.fc1", x, config.fc, config.fc, true, dt)});
  TensorId logits = linear(b, "classifier.fc2", x, config.fc, config.classes, true, dt);
  b.set_loss(b.op("cross_entropy", "loss", {logits, labels}));
  return std::move(b).finish();
}

Expected<ModelPreset> make_preset(const ModelSpec& spec, FieldNaming /*naming*/) {
  const VggConfig config{.classes = or_default(spec.classes, 1000),
                         .batch = or_default(spec.batch, 256),
                         .image = or_default(spec.seq, 224)};
  ModelPreset p{.name = spec.name,
                .family = "vgg",
                .description = !spec.source.empty() ? spec.source : fmt::format("VGG19, {} classes", config.classes),
                .nominal_params = spec.nominal_params,
                .default_batch = config.batch,
                .default_seq = config.image};
  p.build = [name = spec.name, config](const ModelOptions& options, const ir::OpCatalog& catalog) {
    return build_vgg19(name, config, options, catalog);
  };
  return p;
}

ModelSpec vgg(std::string name, const char* source, double nominal, std::int64_t classes, std::int64_t batch) {
  return {.family = "vgg", .name = std::move(name), .source = source, .nominal_params = nominal, .seq = 224,
          .batch = batch, .classes = classes};
}

}  // namespace

ModelFamily vgg_family() {
  return {
      .name = "vgg",
      .summary = "VGG19 (configuration E): 16 3x3 convolutions, five max pools, three fully connected layers",
      .fields = {{SpecField::classes, "classifier outputs", "1000"},
                 {SpecField::seq, "image side (a multiple of 32)", "224"},
                 {SpecField::batch, "global batch (images)", "256"}},
      .make = make_preset,
      .presets = {vgg("vgg19", "VGG19 (Simonyan & Zisserman 2015), ImageNet, 1000 classes", 143.7e6, 1000, 256),
                  vgg("vgg19-4.2b", "VGG19 with a 1,000,000-class classifier (Rhino Table 3), batch 128", 4.2e9,
                      1000000, 128)},
  };
}

}  // namespace loom::models
