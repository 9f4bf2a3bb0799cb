// The model zoo: builders of forward Graphs (with a scalar loss) for the papers' models, and their
// named presets (REFERENCE.md). Each family lives in its own file; this header is the catalogue.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"
#include "loom/models/model_spec.h"

namespace loom::models {

// How attention is built (transformer_blocks.h). fused: one scaled_dot_product_attention op, priced as a
// flash kernel that never holds the s x t scores (its backward keeps q, k, v and the output). eager: the ops
// PyTorch 1.x and Megatron-LM v3 run (q k^T, mask, softmax, dropout, times v), whose scores, probabilities
// and dropped probabilities are [b, heads, s, t] tensors: held, saved for backward and split like any op.
// eager_fp32_softmax: eager with Megatron-LM v3's unfused softmax in fp32 (its torch path for key lengths
// over 4096, with query-key layer scaling's attention_softmax_in_fp32): the 16-bit scores cast to fp32,
// scaled, masked, softmax in fp32 (saved), cast back, then dropout; fp32 models have nothing to cast.
enum class AttentionImpl : std::uint8_t { fused, eager, eager_fp32_softmax };
std::string_view name(AttentionImpl impl);                    // "fused", "eager", "eager-fp32"
Expected<AttentionImpl> parse_attention_impl(std::string_view text);

// Options every preset accepts; 0 means "the preset's default".
struct ModelOptions {
  std::int64_t batch = 0;        // samples per step (global batch)
  std::int64_t seq = 0;          // sequence length (tokens) or image side (pixels) for vision models
  ir::DType dtype = ir::DType::bf16;  // activations and weights; optimizer keeps fp32 master copies
  std::int64_t layers = 0;       // override the depth (e.g. to shrink a preset for verification)
  // Build a tiny model of the same architecture (same op types, block kinds and options such as causal
  // masks, biases, grouped-query attention or expert routing) for verification with the float64
  // interpreter: two layers (or the family's fewest that keep every block kind), widths of 8-32 with
  // heads of 4 channels, vocabularies and classes of 16-64, sequences or image sides of 8-16, batch 4.
  // Every dimension a policy splits (batch, heads, hidden, ffn, vocabulary, experts) is divisible by 4.
  // batch, seq and layers above still override the shrunk defaults.
  bool shrink = false;
  // Pad the vocabulary (embedding rows, logits) up to a multiple of this, as Megatron-LM does
  // (--make-vocab-size-divisible-by, default 128): GPT's 50257 becomes 50304, so the head's GEMM is
  // aligned and divides over tensor-parallel ranks. 1 keeps the tokenizer's size. Shrunk models keep theirs.
  std::int64_t vocab_multiple = 128;
  // Replace the preset's vocabulary (token tables, logits) with this many tokens, before padding; 0 keeps
  // the preset's. Models without a token vocabulary (vision, AlphaFold2) have none to replace. Shrunk
  // models keep theirs.
  std::int64_t vocab = 0;
  // The attention form of every attention block (the families built on transformer_blocks: gpt, llama, bert,
  // t5, mbart, moe, swin); the others have none and refuse the eager forms.
  AttentionImpl attention = AttentionImpl::fused;
};

// `vocab` (or options.vocab when set) rounded up to a multiple of options.vocab_multiple (unchanged when
// shrunk; not rounded when the multiple is 1).
std::int64_t padded_vocab(std::int64_t vocab, const ModelOptions& options);

struct ModelPreset {
  std::string name;         // "gpt3-175b"
  std::string family;       // "gpt"
  std::string description;  // "GPT-3 175B (Brown et al. 2020): L96 h12288 a96"
  double nominal_params = 0;  // the count the paper names the model by, e.g. 175e9
  std::int64_t default_batch = 1;
  std::int64_t default_seq = 0;
  ModelSpec spec;  // what the preset was made from: `loom models --write-files` writes it as a model file
  // Builds the forward graph; ops are resolved against `catalog`.
  std::function<Expected<ir::Graph>(const ModelOptions&, const ir::OpCatalog&)> build;
};

inline constexpr std::int64_t kMaxLayers = 1024;
inline constexpr std::int64_t kMaxBatchOrSeq = std::int64_t{1} << 24;

// Every preset, in a stable order (family, then size).
const std::vector<ModelPreset>& model_presets();
const ModelPreset* find_preset(std::string_view name);

// The preset a spec describes (a model file, the --arch flags): checked (check_spec, families.h), then made
// by its family. Errors name the field as `naming` says.
Expected<ModelPreset> preset_of(const ModelSpec& spec, FieldNaming naming);

// Builds a preset's forward graph with the built-in operator registry. Unknown names and bad
// options are errors naming the preset and the option.
Expected<ir::Graph> build_model(std::string_view preset, const ModelOptions& options);
Expected<ir::Graph> build_model(const ModelPreset& preset, const ModelOptions& options);

}  // namespace loom::models
