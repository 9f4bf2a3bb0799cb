// AlphaFold2's Evoformer stack (Jumper et al. 2021, supplementary Alg. 6) at the sizes of nnScaler
// Table 9 / SuperScaler Table 2: 48/64/96/128 blocks, MSA channels 256/512/1024/1024, MSA heads
// 8/16/32/32 (head dim 32). Pair channels are half the MSA channels (AF2's 256:128), pair heads
// cz/32, triangle-multiplication hidden = cz, outer-product hidden 32, transitions 4x (AF2 values).
// The fused sub-module ops are in src/ops/alphafold.cc; layer norms and transitions are generic ops.
//
// Inputs are the embedded MSA m [b s r cm] and pair z [b r r cz] (128 sequences x 256 residues,
// batch 128, SuperScaler Table 2), as nnScaler's benchmark feeds them.
//
// Recycling ("3 forward passes + 1 backward"): the stack runs four times with shared weights. Each
// later iteration adds layer-normed copies of the previous iteration's outputs to the inputs (AF2's
// recycling embedder, Alg. 32, without the distance features, and over the whole MSA rather than its
// first row); the copies pass through `recycle_detach`, which has no backward, so autograd builds a
// backward only for the last iteration. Loss: a distogram head (linear to 64 bins) with cross entropy
// against integer bin labels [b r r] (AF2 Sec. 1.9.8, without its symmetrisation).
#include "loom/ir/graph_builder.h"
#include "loom/models/families.h"
#include "loom/models/transformer_blocks.h"

namespace loom::models {
namespace {

using ir::GraphBuilder;
using ir::TensorId;

struct EvoformerConfig {
  std::int64_t blocks = 48;
  std::int64_t msa = 256;  // cm
  std::int64_t msa_heads = 8;
  std::int64_t head_dim = 32;
  std::int64_t outer_hidden = 32;  // outer-product-mean projection width
  std::int64_t transition = 4;     // transition widening factor
  std::int64_t bins = 64;          // distogram bins
  std::int64_t iterations = 4;     // 3 recycling forward passes + the one with a backward
  std::int64_t sequences = 128;    // MSA rows (SuperScaler Sec. 6: 128 sequences x 256 residues)
  std::int64_t residues = 256;     // the default `seq`
  std::int64_t batch = 128;
  std::int64_t pair() const { return msa / 2; }
  std::int64_t pair_heads() const { return pair() / head_dim; }
};

// The verification-sized Evoformer (ModelOptions::shrink): one block holds every sub-module; one
// recycling pass keeps the recycling embedder and its detach.
EvoformerConfig shrink(EvoformerConfig config) {
  config.blocks = 1;
  config.msa = 32;        // cm 32, cz 16 (AF2's 2:1)
  config.head_dim = 4;    // 8 MSA heads and 4 pair heads of 4: divisible by 4
  config.msa_heads = 8;
  config.outer_hidden = 4;
  config.transition = 4;  // AF2's factor
  config.bins = 16;
  config.iterations = 2;  // one recycled pass + the one with a backward
  config.sequences = 4;
  config.residues = 8;
  config.batch = 4;
  return config;
}

using Weights = std::vector<TensorId>;

// Parameters are made once (scope "evoformer.<block>") and read by all four iterations.
struct Norm {
  TensorId weight, bias;
};
Norm make_norm(GraphBuilder& b, const std::string& name, std::int64_t channels, ir::DType dt) {
  return {b.parameter(name + ".weight", {channels}, dt), b.parameter(name + ".bias", {channels}, dt)};
}
struct Dense {
  TensorId weight, bias;
};
Dense make_dense(GraphBuilder& b, const std::string& name, std::int64_t in, std::int64_t out, ir::DType dt) {
  return {b.parameter(name + ".weight", {out, in}, dt), b.parameter(name + ".bias", {out}, dt)};
}

// Gated attention: w_qkvg [4 h d c], b_g [h d], (w_bias [h cz]), w_o [c h d], b_o [c].
Weights make_gated_attention(GraphBuilder& b, const std::string& name, std::int64_t channels, std::int64_t heads,
                             std::int64_t head_dim, std::int64_t bias_channels, ir::DType dt) {
  Weights w{b.parameter(name + ".qkvg.weight", {4, heads, head_dim, channels}, dt),
            b.parameter(name + ".gate.bias", {heads, head_dim}, dt)};
  if (bias_channels > 0) w.push_back(b.parameter(name + ".pair_bias.weight", {heads, bias_channels}, dt));
  w.push_back(b.parameter(name + ".out.weight", {channels, heads, head_dim}, dt));
  w.push_back(b.parameter(name + ".out.bias", {channels}, dt));
  return w;
}

// w_ab [4 cz cz], b_ab [4 cz], inner norm, w_o [cz cz], b_o, w_g [cz cz], b_g.
Weights make_triangle_multiplication(GraphBuilder& b, const std::string& name, std::int64_t cz, ir::DType dt) {
  return {b.parameter(name + ".ab.weight", {4, cz, cz}, dt), b.parameter(name + ".ab.bias", {4, cz}, dt),
          b.parameter(name + ".norm_out.weight", {cz}, dt),  b.parameter(name + ".norm_out.bias", {cz}, dt),
          b.parameter(name + ".out.weight", {cz, cz}, dt),   b.parameter(name + ".out.bias", {cz}, dt),
          b.parameter(name + ".gate.weight", {cz, cz}, dt),  b.parameter(name + ".gate.bias", {cz}, dt)};
}

struct Transition {
  Norm norm;
  Dense up, down;
};
Transition make_transition(GraphBuilder& b, const std::string& name, std::int64_t channels, std::int64_t factor,
                           ir::DType dt) {
  return {make_norm(b, name + ".norm", channels, dt), make_dense(b, name + ".linear1", channels, factor * channels, dt),
          make_dense(b, name + ".linear2", factor * channels, channels, dt)};
}

struct BlockWeights {
  Norm row_norm_m, row_norm_z, col_norm, opm_norm, tri_out_norm, tri_in_norm, tri_start_norm, tri_end_norm;
  Weights row_attention, col_attention, opm, tri_out, tri_in, tri_start, tri_end;
  Transition msa_transition, pair_transition;
};

BlockWeights make_block(GraphBuilder& b, const EvoformerConfig& c, ir::DType dt) {
  const std::int64_t cm = c.msa, cz = c.pair();
  BlockWeights w;
  w.row_norm_m = make_norm(b, "msa_row_attention.norm_m", cm, dt);
  w.row_norm_z = make_norm(b, "msa_row_attention.norm_z", cz, dt);
  w.row_attention = make_gated_attention(b, "msa_row_attention", cm, c.msa_heads, c.head_dim, cz, dt);
  w.col_norm = make_norm(b, "msa_column_attention.norm", cm, dt);
  w.col_attention = make_gated_attention(b, "msa_column_attention", cm, c.msa_heads, c.head_dim, 0, dt);
  w.msa_transition = make_transition(b, "msa_transition", cm, c.transition, dt);
  w.opm_norm = make_norm(b, "outer_product_mean.norm", cm, dt);
  const std::int64_t outer = c.outer_hidden;
  w.opm = {b.parameter("outer_product_mean.ab.weight", {2, outer, cm}, dt),
           b.parameter("outer_product_mean.ab.bias", {2, outer}, dt),
           b.parameter("outer_product_mean.out.weight", {cz, outer * outer}, dt),
           b.parameter("outer_product_mean.out.bias", {cz}, dt)};
  w.tri_out_norm = make_norm(b, "triangle_multiplication_outgoing.norm_in", cz, dt);
  w.tri_out = make_triangle_multiplication(b, "triangle_multiplication_outgoing", cz, dt);
  w.tri_in_norm = make_norm(b, "triangle_multiplication_incoming.norm_in", cz, dt);
  w.tri_in = make_triangle_multiplication(b, "triangle_multiplication_incoming", cz, dt);
  w.tri_start_norm = make_norm(b, "triangle_attention_starting.norm", cz, dt);
  w.tri_start = make_gated_attention(b, "triangle_attention_starting", cz, c.pair_heads(), c.head_dim, cz, dt);
  w.tri_end_norm = make_norm(b, "triangle_attention_ending.norm", cz, dt);
  w.tri_end = make_gated_attention(b, "triangle_attention_ending", cz, c.pair_heads(), c.head_dim, cz, dt);
  w.pair_transition = make_transition(b, "pair_transition", cz, c.transition, dt);
  return w;
}

Weights operands(std::vector<TensorId> activations, const Weights& weights) {
  activations.insert(activations.end(), weights.begin(), weights.end());
  return activations;
}

TensorId apply_norm(GraphBuilder& b, const std::string& name, TensorId x, const Norm& n) {
  return b.op("layer_norm", name, {x, n.weight, n.bias});
}

// LN, linear to 4x, relu, linear back (Alg. 9 / 15).
TensorId apply_transition(GraphBuilder& b, TensorId x, const Transition& t) {
  TensorId h = apply_norm(b, "norm", x, t.norm);
  h = b.op("relu", "relu", {b.op("linear", "linear1", {h, t.up.weight, t.up.bias})});
  return b.op("linear", "linear2", {h, t.down.weight, t.down.bias});
}

// One Evoformer block (Alg. 6); dropout is left out (it changes neither shapes nor parameters).
std::pair<TensorId, TensorId> evoformer_block(GraphBuilder& b, TensorId m, TensorId z, const BlockWeights& w) {
  const auto residual = [&](const std::string& scope, TensorId x, auto&& update) {
    auto s = b.scope(scope);
    return b.op("add", "residual", {x, update()});
  };
  m = residual("msa_row_attention", m, [&] {
    TensorId mn = apply_norm(b, "norm_m", m, w.row_norm_m), zn = apply_norm(b, "norm_z", z, w.row_norm_z);
    return b.op("msa_row_attention_with_pair_bias", "attention", operands({mn, zn}, w.row_attention));
  });
  m = residual("msa_column_attention", m, [&] {
    return b.op("msa_column_attention", "attention", operands({apply_norm(b, "norm", m, w.col_norm)}, w.col_attention));
  });
  m = residual("msa_transition", m, [&] { return apply_transition(b, m, w.msa_transition); });
  z = residual("outer_product_mean", z, [&] {
    TensorId mn = apply_norm(b, "norm", m, w.opm_norm);
    return b.op("outer_product_mean", "update", operands({mn, mn}, w.opm));
  });
  const auto triangle_update = [&](const std::string& scope, const Norm& n, const Weights& weights, const char* mode) {
    z = residual(scope, z, [&] {
      TensorId zn = apply_norm(b, "norm_in", z, n);
      return b.op("triangle_multiplication", "update", operands({zn, zn, zn}, weights), {{"mode", std::string(mode)}});
    });
  };
  triangle_update("triangle_multiplication_outgoing", w.tri_out_norm, w.tri_out, "outgoing");
  triangle_update("triangle_multiplication_incoming", w.tri_in_norm, w.tri_in, "incoming");
  const auto triangle_attention = [&](const std::string& scope, const Norm& n, const Weights& weights, const char* mode) {
    z = residual(scope, z, [&] {
      TensorId zn = apply_norm(b, "norm", z, n);
      return b.op("triangle_attention", "attention", operands({zn, zn}, weights), {{"mode", std::string(mode)}});
    });
  };
  triangle_attention("triangle_attention_starting", w.tri_start_norm, w.tri_start, "starting");
  triangle_attention("triangle_attention_ending", w.tri_end_norm, w.tri_end, "ending");
  z = residual("pair_transition", z, [&] { return apply_transition(b, z, w.pair_transition); });
  return {m, z};
}

Expected<ir::Graph> build_alphafold(const std::string& name, const EvoformerConfig& preset, const ModelOptions& options,
                                    const ir::OpCatalog& catalog) {
  const EvoformerConfig config = options.shrink ? shrink(preset) : preset;
  const StepShape step = resolve_step_shape(options, config.batch, config.residues, config.blocks);
  const ir::DType dt = step.dtype;
  const std::int64_t cm = config.msa, cz = config.pair(), r = step.seq;
  GraphBuilder b(name, catalog);
  const TensorId msa = b.input("msa", {step.batch, config.sequences, r, cm}, dt);
  const TensorId pair = b.input("pair", {step.batch, r, r, cz}, dt);
  const TensorId labels = b.input("distogram_bins", {step.batch, r, r}, ir::DType::i64);
  const Norm recycle_m = make_norm(b, "recycling.norm_m", cm, dt);
  const Norm recycle_z = make_norm(b, "recycling.norm_z", cz, dt);
  std::vector<BlockWeights> blocks;
  for (std::int64_t i = 0; i < step.layers; ++i) {
    auto scope = b.scope(fmt::format("evoformer.{}", i));
    blocks.push_back(make_block(b, config, dt));
  }
  const Dense head = make_dense(b, "distogram", cz, config.bins, dt);
  TensorId m = msa, z = pair;
  for (std::int64_t iteration = 0; iteration < config.iterations; ++iteration) {
    auto scope = b.scope(fmt::format("iteration{}", iteration));
    if (iteration > 0) {
      TensorId m_prev = b.op("recycle_detach", "recycling.detach_m", {m});
      TensorId z_prev = b.op("recycle_detach", "recycling.detach_z", {z});
      m = b.op("add", "recycling.add_m", {msa, apply_norm(b, "recycling.norm_m", m_prev, recycle_m)});
      z = b.op("add", "recycling.add_z", {pair, apply_norm(b, "recycling.norm_z", z_prev, recycle_z)});
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      auto block = b.scope(fmt::format("evoformer.{}", i));
      std::tie(m, z) = evoformer_block(b, m, z, blocks[i]);
    }
  }
  TensorId logits = b.op("linear", "distogram", {z, head.weight, head.bias});
  b.set_loss(b.op("cross_entropy", "loss", {logits, labels}));
  return std::move(b).finish();
}

Expected<ModelPreset> make_preset(const ModelSpec& spec, FieldNaming naming) {
  const EvoformerConfig config{.blocks = spec.layers,
                               .msa = spec.hidden,
                               .msa_heads = spec.heads,
                               .head_dim = or_default(spec.head_dim, 32),
                               .residues = or_default(spec.seq, 256),
                               .batch = or_default(spec.batch, 128)};
  // The pair representation is half the MSA's width, in heads of head_dim channels.
  if (config.msa % (2 * config.head_dim) != 0)
    return fail(fmt::format("{} {} is not a multiple of 2 x {} {}: the pair channels (hidden / 2) split into heads of "
                            "head_dim",
                            field_name(SpecField::hidden, naming), config.msa, field_name(SpecField::head_dim, naming),
                            config.head_dim),
                fmt::format("give a hidden width that is a multiple of {}", 2 * config.head_dim));
  ModelPreset p{.name = spec.name,
                .family = "alphafold",
                .description = fmt::format("AlphaFold2 Evoformer ({}): {} blocks, cm {} cz {} heads {}, 128 seqs x {} "
                                           "residues, 3 recycles + 1",
                                           spec.source.empty() ? std::string("--arch") : spec.source, config.blocks,
                                           config.msa, config.pair(), config.msa_heads, config.residues),
                .nominal_params = spec.nominal_params,
                .default_batch = config.batch,
                .default_seq = config.residues};
  p.build = [name = spec.name, config](const ModelOptions& options, const ir::OpCatalog& catalog) {
    return build_alphafold(name, config, options, catalog);
  };
  return p;
}

ModelSpec alphafold(std::string name, double nominal, std::int64_t blocks, std::int64_t msa, std::int64_t heads) {
  return {.family = "alphafold", .name = std::move(name), .source = "nnScaler Table 9, SuperScaler Table 2",
          .nominal_params = nominal, .layers = blocks, .hidden = msa, .heads = heads, .seq = 256, .batch = 128};
}

}  // namespace

// Parameters: 87.8M / 448M / 2.63B / 3.51B against the papers' 87M / 930M / 2.4B / 3.2B (the papers do
// not give the pair width; cz = cm/2 reproduces AF2 exactly at 87M, see the file comment).
ModelFamily alphafold_family() {
  return {
      .name = "alphafold",
      .summary = "AlphaFold2's Evoformer stack with recycling (3 forward passes + 1 with backward) and a distogram head",
      .fields = {{SpecField::layers, "Evoformer blocks", ""},
                 {SpecField::hidden, "MSA channels c_m (pair channels c_z = c_m / 2)", ""},
                 {SpecField::heads, "MSA attention heads", ""},
                 {SpecField::head_dim, "channels per head (pair heads: c_z / head_dim)", "32"},
                 {SpecField::seq, "residues", "256"},
                 {SpecField::batch, "global batch", "128"}},
      .make = make_preset,
      .presets = {alphafold("alphafold2-87m", 87e6, 48, 256, 8), alphafold("alphafold2-930m", 930e6, 64, 512, 16),
                  alphafold("alphafold2-2.4b", 2.4e9, 96, 1024, 32), alphafold("alphafold2-3.2b", 3.2e9, 128, 1024, 32)},
  };
}

}  // namespace loom::models
