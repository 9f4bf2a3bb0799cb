// ModelSpec (models/model_spec.h) and the family checks (families.h): set_field's parsing, check_spec's
// errors naming the field in the file's or the flag's spelling, and specs of random sizes built through
// preset_of with the closed-form parameter counts of gpt.cc and llama.cc.
#include <gtest/gtest.h>

#include <random>

#include "loom/models/families.h"
#include "model_test_support.h"

namespace loom::models {
namespace {

using testing::parameter_count;

ModelSpec gpt_spec() {
  return {.family = "gpt", .layers = 2, .hidden = 64, .heads = 4, .vocab = 100, .seq = 16, .batch = 2};
}

// The error check_spec gives, as "message | hint"; "" when the spec passes.
std::string spec_error(const ModelSpec& spec, FieldNaming naming = FieldNaming::file_key) {
  Expected<ModelPreset> preset = preset_of(spec, naming);
  return preset ? std::string() : preset.error().message + " | " + preset.error().hint;
}

TEST(SetField, ReadsWholeNumbersRealsAndRefusesTheRest) {
  ModelSpec spec;
  ASSERT_TRUE(set_field(spec, SpecField::hidden, "2048"));
  EXPECT_EQ(spec.hidden, 2048);
  ASSERT_TRUE(set_field(spec, SpecField::vocab, "5e4"));  // an integral number written with an exponent
  EXPECT_EQ(spec.vocab, 50000);
  ASSERT_TRUE(set_field(spec, SpecField::norm_eps, "1e-5"));
  EXPECT_EQ(spec.norm_eps, 1e-5);
  for (const char* bad : {"", "abc", "2.5", "0", "-3", "nan", "inf", "1e30", "12 heads"})
    EXPECT_FALSE(set_field(spec, SpecField::heads, bad)) << bad;
  for (const char* bad : {"0", "-1e-5", "x", "inf"}) EXPECT_FALSE(set_field(spec, SpecField::rope_base, bad)) << bad;
  EXPECT_EQ(spec.heads, 0);  // nothing half-set
  EXPECT_EQ(spec.rope_base, 0);
}

TEST(SetField, ValueTextReadsBackExactly) {
  ModelSpec spec;
  ASSERT_TRUE(set_field(spec, SpecField::rope_base, "500000"));
  ASSERT_TRUE(set_field(spec, SpecField::norm_eps, "1.0000000000000001e-06"));
  for (const SpecField field : {SpecField::rope_base, SpecField::norm_eps}) {
    ModelSpec back;
    ASSERT_TRUE(set_field(back, field, value_text(spec, field)));
    EXPECT_EQ(value_of(back, field), value_of(spec, field));
  }
}

TEST(SpecFields, KeysAndFlagsNameEveryFieldOnce) {
  ASSERT_EQ(spec_fields().size(), kSpecFieldCount);
  for (const SpecField field : spec_fields()) {
    const SpecField* found = find_spec_field(key(field));
    ASSERT_NE(found, nullptr) << key(field);
    EXPECT_EQ(*found, field);
    EXPECT_TRUE(flag(field).starts_with("--"));
  }
  EXPECT_EQ(find_spec_field("kv-heads"), nullptr);  // files spell keys with underscores
  EXPECT_EQ(field_name(SpecField::kv_heads, FieldNaming::flag), "--kv-heads");
  EXPECT_EQ(field_name(SpecField::kv_heads, FieldNaming::file_key), "'kv_heads'");
}

TEST(CheckSpec, EveryPresetPassesAndEveryFamilyHasPresets) {
  for (const ModelFamily& family : model_families()) {
    EXPECT_FALSE(family.presets.empty()) << family.name;
    for (const ModelSpec& spec : family.presets) {
      EXPECT_EQ(spec.family, family.name);
      EXPECT_EQ(spec_error(spec), "") << spec.name;
    }
  }
  EXPECT_EQ(model_presets().size(), 58u);
}

TEST(CheckSpec, HeadsNotDividingHiddenNameBothFields) {
  ModelSpec spec = gpt_spec();
  spec.heads = 5;
  EXPECT_EQ(spec_error(spec, FieldNaming::flag),
            "--heads 5 does not divide --hidden 64 | the heads split the hidden width evenly: give a head count that "
            "divides 64, or --head-dim for a wider or narrower attention");
  EXPECT_TRUE(spec_error(spec).starts_with("'heads' 5 does not divide 'hidden' 64"));
  spec.head_dim = 16;  // an attention width of 80 beside a stream of 64, as GPT-3 13B has
  EXPECT_EQ(spec_error(spec), "");
}

TEST(CheckSpec, GroupedQueryHeadsMustDivideTheQueryHeads) {
  ModelSpec spec{.family = "llama", .layers = 2, .hidden = 64, .heads = 8, .kv_heads = 3, .ffn = 96};
  EXPECT_TRUE(spec_error(spec).starts_with("'kv_heads' 3 does not divide 'heads' 8")) << spec_error(spec);
  spec.kv_heads = 16;
  EXPECT_TRUE(spec_error(spec, FieldNaming::flag).starts_with("--kv-heads 16 is more than --heads 8"));
  spec.kv_heads = 2;
  EXPECT_EQ(spec_error(spec), "");
}

TEST(CheckSpec, AFieldTheFamilyLacksIsNamedWithTheFamilysFields) {
  ModelSpec spec = gpt_spec();
  spec.experts = 8;
  EXPECT_EQ(spec_error(spec, FieldNaming::flag),
            "family gpt has no --experts | drop it; family gpt takes --layers, --hidden, --heads, --head-dim, --ffn, "
            "--vocab, --seq, --positions, --global-batch (docs/models.md)");
  spec = {.family = "resnet", .layers = 50, .hidden = 64};
  EXPECT_TRUE(spec_error(spec).starts_with("family resnet has no 'hidden'"));
}

TEST(CheckSpec, MissingNegativeHugeAndUnknownAreErrors) {
  EXPECT_EQ(spec_error({.family = "gpt", .layers = 2, .heads = 4}),
            "family gpt needs 'hidden' (d_model) | give 'hidden'");
  EXPECT_EQ(spec_error({.family = "moe", .layers = 2, .hidden = 64, .ffn = 128}, FieldNaming::flag),
            "family moe needs --experts (experts per MoE layer) | give --experts");
  ModelSpec spec = gpt_spec();
  spec.ffn = -4;
  EXPECT_TRUE(spec_error(spec).starts_with("'ffn' is negative: -4"));
  spec = gpt_spec();
  spec.layers = kMaxLayers + 1;
  EXPECT_TRUE(spec_error(spec).starts_with("'layers' 1025 is over Loom's limit of 1024"));
  EXPECT_EQ(spec_error({.family = "gtp"}),
            "unknown model family 'gtp' | did you mean 'gpt'?; the families are gpt, llama, bert, t5, mbart, moe, "
            "swin, alphafold, resnet, vgg, unet (docs/models.md)");
  EXPECT_TRUE(spec_error({}).starts_with("no model family given"));
}

TEST(CheckSpec, SequenceBeyondTheLearnedPositions) {
  ModelSpec spec = gpt_spec();
  spec.positions = 8;
  EXPECT_TRUE(spec_error(spec, FieldNaming::flag).starts_with("--seq 16 is longer than the --positions 8"));
  spec.positions = 32;  // a table longer than the default sequence is fine
  ASSERT_EQ(spec_error(spec), "");
  const ModelPreset preset = *preset_of(spec, FieldNaming::file_key);
  EXPECT_EQ(preset.default_seq, 16);
  auto graph = build_model(preset, {});
  ASSERT_TRUE(graph) << graph.error().to_string();
  EXPECT_EQ(graph->tensor(graph->inputs.front()).shape, (ir::Shape{2, 16}));
}

TEST(CheckSpec, FamilyRulesNameTheirField) {
  EXPECT_TRUE(spec_error({.family = "t5", .layers = 3, .hidden = 64, .heads = 4}).starts_with(
      "'layers' 3 is the encoder + decoder total and must be even"));
  EXPECT_TRUE(spec_error({.family = "moe", .layers = 1, .hidden = 64, .ffn = 64, .experts = 4}, FieldNaming::flag)
                  .starts_with("--layers 1: every other FFN is a mixture of experts"));
  EXPECT_TRUE(
      spec_error({.family = "resnet", .layers = 34}).starts_with("'layers' 34 is not a bottleneck ResNet depth"));
  EXPECT_TRUE(spec_error({.family = "alphafold", .layers = 1, .hidden = 96, .heads = 4})
                  .starts_with("'hidden' 96 is not a multiple of 2 x 'head_dim' 32"));
  EXPECT_TRUE(spec_error({.family = "mbart", .layers = 2, .hidden = 64, .heads = 4}).starts_with(
      "family mbart needs 'vocab'"));
}

TEST(PresetOf, DefaultsFillWhatASpecLeavesOut) {
  auto preset = preset_of({.family = "llama", .layers = 2, .hidden = 64, .heads = 4, .ffn = 96}, FieldNaming::flag);
  ASSERT_TRUE(preset) << preset.error().to_string();
  EXPECT_EQ(preset->name, "llama");
  EXPECT_EQ(preset->default_seq, 2048);
  EXPECT_EQ(preset->default_batch, 1);
  auto graph = build_model(*preset, {.batch = 1, .seq = 8, .vocab_multiple = 1});
  ASSERT_TRUE(graph) << graph.error().to_string();
  EXPECT_EQ(testing::find_tensor(*graph, "embed_tokens.weight")->shape, (ir::Shape{32000, 64}));
}

// Random GPT and LLaMA specs, as `--arch` states them, built with the parameter counts the files' comments
// derive: GPT 12·L·h² + 13·L·h + V·h + n_ctx·h + 2·h with ffn = 4·h (general ffn: per layer 4·h² + 4·h +
// 2·h·ffn + ffn + h + 4·h); LLaMA per layer 2·h·w_q + 2·h·w_kv + 3·h·ffn + 2·h, plus 2·V·h + h.
TEST(PresetOf, RandomSpecsHaveTheClosedFormParameterCounts) {
  std::mt19937_64 rng(16);
  const auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t heads = pick(1, 6), head_dim = 4 * pick(1, 4), h = heads * head_dim;
    const std::int64_t layers = pick(1, 3), vocab = pick(10, 200), seq = pick(4, 16);
    const std::int64_t ffn = trial % 2 == 0 ? 0 : pick(1, 64);
    const ModelSpec gpt{.family = "gpt", .layers = layers, .hidden = h, .heads = heads, .ffn = ffn, .vocab = vocab,
                        .seq = seq};
    auto graph = build_model(*preset_of(gpt, FieldNaming::flag), {.batch = 1, .vocab_multiple = 1});
    ASSERT_TRUE(graph) << graph.error().to_string();
    const std::int64_t f = ffn > 0 ? ffn : 4 * h;
    EXPECT_EQ(parameter_count(*graph),
              layers * (4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h) + vocab * h + seq * h + 2 * h)
        << "gpt trial " << trial;

    const std::int64_t kv = pick(0, 1) == 0 ? 1 : heads;  // grouped-query (one shared head) or multi-head
    const std::int64_t w_q = heads * head_dim, w_kv = kv * head_dim, llama_ffn = pick(1, 64);
    const ModelSpec llama{.family = "llama", .layers = layers, .hidden = h, .heads = heads, .kv_heads = kv,
                          .ffn = llama_ffn, .vocab = vocab, .seq = seq};
    graph = build_model(*preset_of(llama, FieldNaming::flag), {.batch = 1, .vocab_multiple = 1});
    ASSERT_TRUE(graph) << graph.error().to_string();
    EXPECT_EQ(parameter_count(*graph),
              layers * (2 * h * w_q + 2 * h * w_kv + 3 * h * llama_ffn + 2 * h) + 2 * vocab * h + h)
        << "llama trial " << trial;
  }
}

}  // namespace
}  // namespace loom::models
