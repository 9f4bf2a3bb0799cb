// A model's architecture as plain data: a family and that family's sizes, as a model file states them
// (docs/models.md, read by frontend/model_file.h) or the `--arch` flags do. Every preset of the zoo is one
// ModelSpec (ModelPreset::spec), built by the same family builder a file or the flags reach.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "loom/core/error.h"

namespace loom::models {

// The sizes a spec may give. Which a family takes, and its defaults, are in families.h (model_families()).
enum class SpecField : std::uint8_t {
  layers,        // depth: transformer layers, Evoformer blocks, Swin blocks, ResNet depth (50/101/152/200)
  hidden,        // model width: d_model, Swin's stage-1 channels C, AlphaFold's MSA channels c_m
  heads,         // attention heads (Swin: of stage 1; AlphaFold: of the MSA attention)
  kv_heads,      // key/value heads of grouped-query attention
  head_dim,      // channels per head, where the attention width is not hidden
  ffn,           // the MLP's inner width (MoE: every expert's)
  vocab,         // tokens of the vocabulary, before padding (ModelOptions::vocab_multiple)
  seq,           // the default sequence length, image side or residue count
  positions,     // rows of a learned position table (default: seq)
  batch,         // the default global batch (samples per step)
  experts,       // experts of a mixture-of-experts layer
  classes,       // classifier outputs
  window,        // Swin's attention window side
  channels,      // a CNN's stem / first-stage width
  width_factor,  // Wide-ResNet's widening of the 3x3 convolution
  rope_base,     // RoPE theta (real)
  norm_eps,      // RMSNorm epsilon (real)
};
inline constexpr std::size_t kSpecFieldCount = 17;

// How errors name a field: as a model file's key ("kv_heads") or as a flag ("--kv-heads").
enum class FieldNaming : std::uint8_t { file_key, flag };

struct ModelSpec {
  std::string family;         // "gpt" (model_families() lists them)
  std::string name;           // the graph's name; "": the family's
  std::string source;         // where the sizes come from, e.g. "GPT-3 (Brown et al. 2020)"; "": none
  double nominal_params = 0;  // the parameter count the model is named by; 0: none
  // The sizes; 0 means "not given": the family's default, or an error where the family needs the field.
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t ffn = 0;
  std::int64_t vocab = 0;
  std::int64_t seq = 0;
  std::int64_t positions = 0;
  std::int64_t batch = 0;
  std::int64_t experts = 0;
  std::int64_t classes = 0;
  std::int64_t window = 0;
  std::int64_t channels = 0;
  std::int64_t width_factor = 0;
  double rope_base = 0;
  double norm_eps = 0;

  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

// Every field, in the order above (model files are written in it).
std::span<const SpecField> spec_fields();
std::string_view key(SpecField field);   // "kv_heads"
std::string_view flag(SpecField field);  // "--kv-heads"
bool is_real(SpecField field);           // rope_base, norm_eps
// The field's name in `naming`, quoted for messages: "'kv_heads'" or "--kv-heads".
std::string field_name(SpecField field, FieldNaming naming);
// The field called `key` (a file key); nothing when none is.
const SpecField* find_spec_field(std::string_view key);

// The largest value a whole field takes (Loom's limit: past it a graph's shapes overflow); set_field and
// check_spec refuse more.
std::int64_t limit_of(SpecField field);

// The field's value as a double (whole fields exactly, below 2^53), and whether it is given (non-zero).
double value_of(const ModelSpec& spec, SpecField field);
inline bool given(const ModelSpec& spec, SpecField field) { return value_of(spec, field) != 0; }

// Sets the field from `text`: a whole number (an integral one such as 1.3e9 too) or, for rope_base and
// norm_eps, a finite real; zero and negative values are errors (a field left out is the default).
Expected<void> set_field(ModelSpec& spec, SpecField field, std::string_view text);

// The value as written back by model files: the shortest text that reads back to the same number.
std::string value_text(const ModelSpec& spec, SpecField field);

}  // namespace loom::models
