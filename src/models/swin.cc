// Swin Transformer (Liu et al. 2021) at the papers' scale: nnScaler Table 9 and SuperScaler Table 2.
//
// Layout. Patch embedding (4x4 conv, stride 4, then layer norm) and four stages at C, 2C, 4C, 8C
// channels with 2, 2, L-6, 2 blocks (Swin's distribution, the third stage takes the rest); heads
// double with the width from the table's value (head dim C/heads, 32 for all but the 1.5K presets);
// patch merging (2x2 gather, layer norm, 4C -> 2C linear without bias) between stages; final norm,
// mean over the tokens, linear classifier (1000 classes), cross entropy.
//
// Blocks alternate regular and shifted windows: pre-norm, [cyclic shift by -ws/2], window partition,
// multi-head attention on [b·nW, ws², C] with the learned relative position bias [heads, ws², ws²],
// window reverse, [shift back], residual; pre-norm GELU MLP (4C), residual.
// Simplification: shifted blocks omit the attention mask that keeps wrapped-around regions apart; it
// changes neither parameters nor the ops' shapes, only adds a [nW, ws², ws²] term to the scores.
//
// Resolution: 1536x1536 (SuperScaler Sec. 6, "the highest in the paper"; nnScaler Table 9 names no
// resolution, so its presets use the same). Window 12, which divides every stage's token grid at 1536
// (384, 192, 96, 48) as Swin's 384-pixel fine-tuning did; 512 images per step (SuperScaler Table 2).
// The SuperScaler presets are named swin-ss-* (its 1.8B equals nnScaler's swin-1.8b).
#include <algorithm>

#include "loom/ir/graph_builder.h"
#include "loom/models/families.h"
#include "loom/models/transformer_blocks.h"

namespace loom::models {
namespace {

using ir::GraphBuilder;
using ir::TensorId;
using IntList = std::vector<std::int64_t>;

struct SwinConfig {
  std::int64_t layers = 0;  // blocks over all stages
  std::int64_t hidden = 0;  // stage-1 width C
  std::int64_t heads = 0;   // stage-1 heads
  std::int64_t patch = 4;
  std::int64_t window = 12;
  std::int64_t classes = 1000;
  std::int64_t stages = 4;
  std::int64_t image = 1536;  // default image side
  std::int64_t batch = 512;
};

// The verification-sized Swin (ModelOptions::shrink): two stages of a regular and a shifted block with a
// patch merge between them, the fewest that keep every block kind.
SwinConfig shrink(SwinConfig config) {
  config.stages = 2;
  config.layers = 4;    // 2 + 2 blocks
  config.hidden = 16;   // stage 1: 4 heads of 4; stage 2: 32 channels, 8 heads
  config.heads = 4;
  config.patch = 2;
  config.window = 2;    // 2x2 windows, shift by 1
  config.image = 16;    // 8x8 tokens (16 windows) in stage 1, 4x4 (4 windows) in stage 2
  config.classes = 16;  // divisible by 4
  config.batch = 4;
  return config;
}

// Blocks per stage: 2 each, except the third (the last when there are fewer) which takes the rest:
// 2, 2, layers - 6, 2 for Swin's four stages.
std::vector<std::int64_t> stage_depths(std::int64_t layers, std::int64_t stages) {
  std::vector<std::int64_t> depths(static_cast<std::size_t>(stages), 2);
  const auto rest = static_cast<std::size_t>(std::min<std::int64_t>(2, stages - 1));
  depths[rest] = layers - 2 * (stages - 1);
  return depths;
}

// x [b H W C] -> [b H W C]: one (shifted) window attention block and its MLP.
TensorId swin_block(GraphBuilder& b, TensorId x, std::int64_t channels, std::int64_t heads, std::int64_t window,
                    bool shifted, ir::DType dt, AttentionImpl impl) {
  if (!b.ok()) return {};
  const ir::Shape shape = b.shape(x);
  const std::int64_t height = shape[1], width = shape[2];
  TensorId h = norm(b, "norm1", x, channels, {}, dt);
  if (shifted) h = b.op("cyclic_shift", "shift", {h}, {{"shift", -window / 2}});
  h = b.op("window_partition", "partition", {h}, {{"window_size", window}});
  TensorId table = b.parameter("attn.relative_position_bias_table", {(2 * window - 1) * (2 * window - 1), heads}, dt);
  TensorId bias = b.op("relative_position_bias", "attn.relative_position_bias", {table}, {{"window_size", window}});
  {
    auto attn = b.scope("attn");
    h = self_attention(b, h, {.hidden = channels, .heads = heads, .impl = impl}, dt, bias);
  }
  h = b.op("window_reverse", "reverse", {h}, {{"window_size", window}, {"height", height}, {"width", width}});
  if (shifted) h = b.op("cyclic_shift", "unshift", {h}, {{"shift", window / 2}});
  x = b.op("add", "residual1", {x, h});
  h = norm(b, "norm2", x, channels, {}, dt);
  {
    auto mlp_scope = b.scope("mlp");
    h = mlp(b, h, {.hidden = channels, .ffn = 4 * channels}, dt);
  }
  return b.op("add", "residual2", {x, h});
}

Expected<ir::Graph> build_swin(const std::string& name, const SwinConfig& preset, const ModelOptions& options,
                               const ir::OpCatalog& catalog) {
  const SwinConfig config = options.shrink ? shrink(preset) : preset;
  const StepShape step = resolve_step_shape(options, config.batch, config.image, config.layers);
  const std::int64_t min_layers = 2 * config.stages - 1;
  if (step.layers < min_layers)
    return fail(fmt::format("{}: {} layers leave a stage empty; Swin needs at least {} ({})", name, step.layers,
                            min_layers, config.stages == 4 ? "2, 2, L-6, 2" : "2, L-2"));
  const std::int64_t grain = config.patch * config.window << (config.stages - 1);
  if (step.seq % grain != 0)
    return fail(fmt::format("{}: image side {} must be a multiple of {} (patch {} x window {} x 2^{} merges)", name,
                            step.seq, grain, config.patch, config.window, config.stages - 1));
  const ir::DType dt = step.dtype;
  GraphBuilder b(name, catalog);
  TensorId images = b.input("images", {step.batch, 3, step.seq, step.seq}, dt);
  TensorId labels = b.input("labels", {step.batch}, ir::DType::i64);
  TensorId x;
  {
    auto scope = b.scope("patch_embed");
    TensorId w = b.parameter("proj.weight", {config.hidden, 3, config.patch, config.patch}, dt);
    x = b.op("conv2d", "proj", {images, w, b.parameter("proj.bias", {config.hidden}, dt)},
             {{"stride", IntList{config.patch}}});
    x = b.op("permute", "to_channels_last", {x}, {{"dims", IntList{0, 2, 3, 1}}});
    x = norm(b, "norm", x, config.hidden, {}, dt);
  }
  const std::vector<std::int64_t> depths = stage_depths(step.layers, config.stages);
  std::int64_t channels = config.hidden, heads = config.heads;
  for (std::int64_t stage = 0; stage < config.stages; ++stage) {
    auto stage_scope = b.scope(fmt::format("layers.{}", stage));
    for (std::int64_t block = 0; block < depths[static_cast<std::size_t>(stage)]; ++block) {
      auto block_scope = b.scope(fmt::format("blocks.{}", block));
      x = swin_block(b, x, channels, heads, config.window, block % 2 == 1, dt, options.attention);
    }
    if (stage + 1 < config.stages) {
      auto merge = b.scope("downsample");
      x = b.op("patch_merging", "merge", {x});
      x = norm(b, "norm", x, 4 * channels, {}, dt);
      x = linear(b, "reduction", x, 4 * channels, 2 * channels, false, dt);
      channels *= 2;
      heads *= 2;
    }
  }
  x = norm(b, "norm", x, channels, {}, dt);
  x = b.op("mean", "avgpool", {x}, {{"dims", IntList{1, 2}}});
  TensorId logits = linear(b, "head", x, channels, config.classes, true, dt);
  b.set_loss(b.op("cross_entropy", "loss", {logits, labels}));
  return std::move(b).finish();
}

Expected<ModelPreset> make_preset(const ModelSpec& spec, FieldNaming /*naming*/) {
  const SwinConfig config{.layers = spec.layers,
                          .hidden = spec.hidden,
                          .heads = spec.heads,
                          .window = or_default(spec.window, 12),
                          .classes = or_default(spec.classes, 1000),
                          .image = or_default(spec.seq, 1536),
                          .batch = or_default(spec.batch, 512)};
  ModelPreset p{.name = spec.name,
                .family = "swin",
                .description = fmt::format("Swin Transformer ({}): L{} C{} heads {}, {}x{}, window {}",
                                           spec.source.empty() ? std::string("--arch") : spec.source, config.layers,
                                           config.hidden, config.heads, config.image, config.image, config.window),
                .nominal_params = spec.nominal_params,
                .default_batch = config.batch,
                .default_seq = config.image};
  p.build = [name = spec.name, config](const ModelOptions& options, const ir::OpCatalog& catalog) {
    return build_swin(name, config, options, catalog);
  };
  return p;
}

ModelSpec swin(std::string name, const char* source, double nominal, std::int64_t layers, std::int64_t hidden,
               std::int64_t heads) {
  return {.family = "swin", .name = std::move(name), .source = source, .nominal_params = nominal, .layers = layers,
          .hidden = hidden, .heads = heads, .seq = 1536, .batch = 512};
}

}  // namespace

ModelFamily swin_family() {
  return {
      .name = "swin",
      .summary = "Swin Transformer: four stages of (shifted) window attention at C, 2C, 4C, 8C channels, 2, 2, L-6, 2 "
                 "blocks",
      .fields = {{SpecField::layers, "blocks over all stages (>= 7)", ""},
                 {SpecField::hidden, "stage-1 channels C", ""},
                 {SpecField::heads, "stage-1 heads (doubling per stage)", ""},
                 {SpecField::window, "attention window side", "12"},
                 {SpecField::classes, "classifier outputs", "1000"},
                 {SpecField::seq, "image side (a multiple of 4 x window x 8)", "1536"},
                 {SpecField::batch, "global batch (images)", "512"}},
      .heads_split_hidden = true,
      .make = make_preset,
      .presets =
          {
              swin("swin-1.8b", "nnScaler Table 9", 1.8e9, 32, 512, 16),
              swin("swin-5b", "nnScaler Table 9", 5.0e9, 40, 768, 24),
              swin("swin-10b", "nnScaler Table 9", 10e9, 48, 1024, 32),
              swin("swin-27b", "nnScaler Table 9", 27e9, 56, 1536, 32),
              swin("swin-ss-6.6b", "SuperScaler Table 2", 6.6e9, 48, 768, 24),
              swin("swin-ss-13b", "SuperScaler Table 2", 13e9, 56, 1024, 32),
              swin("swin-ss-30b", "SuperScaler Table 2", 30e9, 64, 1536, 32),
          },
  };
}

}  // namespace loom::models
