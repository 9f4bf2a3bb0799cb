// Model files (frontend/model_file.h): every preset's file in models/ builds the preset's graph exactly
// and is what `loom models --write-files` writes; random specs survive write -> read; bad files are errors
// naming the file and the field.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "loom/frontend/model_file.h"
#include "loom/ir/graph_json.h"
#include "loom/models/families.h"

namespace loom::frontend {
namespace {

const std::filesystem::path kModels = std::filesystem::path(LOOM_SOURCE_DIR) / "models";

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const models::ModelPreset& preset : models::model_presets()) names.push_back(preset.name);
  return names;
}

class PresetModelFile : public ::testing::TestWithParam<std::string> {};

// The acceptance of issue 16 item 4: `--model X` and `--model-file models/X.yaml` give identical graphs.
TEST_P(PresetModelFile, BuildsThePresetsGraphAndIsWhatTheWriterWrites) {
  const models::ModelPreset& preset = *models::find_preset(GetParam());
  const std::filesystem::path path = kModels / (preset.name + ".yaml");
  ASSERT_TRUE(std::filesystem::exists(path)) << path << ": run `loom models --write-files models`";
  EXPECT_EQ(read(path), model_to_yaml(preset.spec)) << path << " differs from the preset in the code";

  auto from_file = load_model_file(path.string());
  ASSERT_TRUE(from_file) << from_file.error().to_string();
  EXPECT_EQ(from_file->spec, preset.spec);
  EXPECT_EQ(from_file->name, preset.name);
  EXPECT_EQ(from_file->description, preset.description);
  EXPECT_EQ(from_file->default_batch, preset.default_batch);
  EXPECT_EQ(from_file->default_seq, preset.default_seq);
  // Batch 1 keeps the graphs cheap; the op structure does not depend on it.
  const models::ModelOptions options{.batch = 1};
  auto expected = models::build_model(preset.name, options);
  auto built = models::build_model(*from_file, options);
  ASSERT_TRUE(expected) << expected.error().to_string();
  ASSERT_TRUE(built) << built.error().to_string();
  EXPECT_EQ(ir::graph_to_json(*built), ir::graph_to_json(*expected));
}

INSTANTIATE_TEST_SUITE_P(AllPresets, PresetModelFile, ::testing::ValuesIn(preset_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == '-' || ch == '.') ch = '_';
                           return name;
                         });

TEST(ModelFiles, TheFolderHoldsOneFilePerPresetAndNothingElse) {
  std::set<std::string> files, presets;
  for (const auto& entry : std::filesystem::directory_iterator(kModels)) files.insert(entry.path().filename().string());
  for (const std::string& name : preset_names()) presets.insert(name + ".yaml");
  EXPECT_EQ(files, presets);
}

// Random specs of every family's fields: write -> read gives the spec back, field for field.
TEST(ModelToYaml, RandomSpecsReadBackExactly) {
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> exponent(-12, 12);
  const auto whole_up_to = [&](std::int64_t limit) {
    return std::uniform_int_distribution<std::int64_t>(1, limit)(rng);
  };
  for (int trial = 0; trial < 200; ++trial) {
    const models::ModelFamily& family =
        models::model_families()[static_cast<std::size_t>(trial) % models::model_families().size()];
    models::ModelSpec spec{.family = std::string(family.name), .name = fmt::format("m{}", trial)};
    if (trial % 3 == 0) spec.source = "a \"quoted\" source: with a colon";
    if (trial % 4 == 0) spec.nominal_params = std::pow(10.0, exponent(rng)) * 7;
    for (const models::FamilyField& f : family.fields) {
      if (rng() % 3 == 0) continue;  // left out: the default
      const std::string text = models::is_real(f.field) ? fmt::format("{}", std::pow(10.0, exponent(rng)))
                                                        : std::to_string(whole_up_to(models::limit_of(f.field)));
      ASSERT_TRUE(models::set_field(spec, f.field, text));
    }
    auto back = parse_model_yaml(model_to_yaml(spec), "<random>");
    ASSERT_TRUE(back) << back.error().to_string() << "\n" << model_to_yaml(spec);
    EXPECT_EQ(*back, spec) << model_to_yaml(spec);
  }
}

// Found by fuzz/model_fuzz.cc: a family the parser keeps as written (preset_of refuses it later) was printed
// unquoted, so control and non-ASCII bytes read back as another text (or not at all).
TEST(ModelToYaml, AnUnknownFamilyReadsBackExactly) {
  for (const std::string& family : {std::string("lla\xc5\xc5ma", 7), std::string("gpt\0\0x", 6), std::string("a: b # c"),
                                   std::string("[gpt]"), std::string("\"quoted\\\"")}) {
    const models::ModelSpec spec{.family = family, .name = "m"};
    auto back = parse_model_yaml(model_to_yaml(spec), "<printed>");
    ASSERT_TRUE(back) << back.error().to_string() << "\n" << model_to_yaml(spec);
    EXPECT_EQ(back->family, family) << model_to_yaml(spec);
  }
  EXPECT_EQ(model_to_yaml(models::ModelSpec{.family = "gpt", .name = "m"}), "# Loom model file (docs/models.md)\nfamily: gpt\nname: \"m\"\n");
}

// Found by fuzz/cluster_fuzz.cc, the same yaml-cpp 0.7 loop: `--model-file` hung on a stray comma.
TEST(ParseModelYaml, AStrayCommaIsAnErrorNotAHang) {
  const auto spec = parse_model_yaml("family: gpt\n---\n, x\n", "m.yaml");
  ASSERT_FALSE(spec);
  EXPECT_EQ(spec.error().message, "model file 'm.yaml': malformed YAML at line 3, column 1: a ',' outside [ ] or { }");
}

TEST(ParseModelYaml, JsonReadsAsYaml) {
  auto spec = parse_model_yaml(R"({"family": "llama", "layers": 2, "hidden": 64, "heads": 8, "kv_heads": 2,
                                  "ffn": 96, "rope_base": 5e5})",
                               "m.json");
  ASSERT_TRUE(spec) << spec.error().to_string();
  EXPECT_EQ(*spec, (models::ModelSpec{.family = "llama", .layers = 2, .hidden = 64, .heads = 8, .kv_heads = 2,
                                      .ffn = 96, .rope_base = 5e5}));
}

// "message | hint" of a bad file.
std::string error_of(const std::string& text) {
  auto spec = parse_model_yaml(text, "bad.yaml");
  if (!spec) return spec.error().message + " | " + spec.error().hint;
  auto preset = models::preset_of(*spec, models::FieldNaming::file_key);
  return preset ? std::string() : preset.error().message;
}

TEST(ParseModelYaml, BadFilesNameTheFileAndTheField) {
  EXPECT_TRUE(error_of("family: gpt\nlayers: [2\n").starts_with("model file 'bad.yaml': malformed YAML at line"));
  EXPECT_TRUE(error_of("").starts_with("model file 'bad.yaml' is empty"));
  EXPECT_TRUE(error_of("- family: gpt\n").starts_with("model file 'bad.yaml': the top level is not a mapping"));
  EXPECT_TRUE(error_of("family: gpt\nlayer: 2\n").starts_with(
      "model file 'bad.yaml': unknown field 'layer' | did you mean 'layers'?"));
  EXPECT_EQ(error_of("family: gpt\nhidden: 64\nhidden: 128\n"),
            "model file 'bad.yaml': field 'hidden' is given twice | keep one of them");
  EXPECT_TRUE(error_of("family: gpt\nhidden: 64\n---\nfamily: llama\n")
                  .starts_with("model file 'bad.yaml' holds 2 YAML documents (separated by '---'), not one"));
  EXPECT_FALSE(error_of("---\nfamily: gpt\n").starts_with("model file 'bad.yaml' holds"));  // one document opened by ---
  EXPECT_TRUE(error_of("family: gpt\nhidden: [64]\n")
                  .starts_with("model file 'bad.yaml': field 'hidden' is not a single value"));
  EXPECT_TRUE(error_of("family: gpt\nhidden:\n").starts_with("model file 'bad.yaml': field 'hidden' has no value"));
  EXPECT_TRUE(
      error_of("family: gpt\nheads: 0\n").starts_with("model file 'bad.yaml': field 'heads' is not positive: 0"));
  EXPECT_TRUE(error_of("family: gpt\nheads: -2\n").starts_with("model file 'bad.yaml': field 'heads' is not positive"));
  EXPECT_TRUE(error_of("family: gpt\nheads: many\n").starts_with(
      "model file 'bad.yaml': field 'heads' is not a whole number: 'many'"));
  EXPECT_TRUE(error_of("layers: 2\n").starts_with("model file 'bad.yaml': field 'family' is missing"));
  EXPECT_TRUE(error_of("family: \"\"\n").starts_with("model file 'bad.yaml': field 'family' is empty"));
  // Well-formed files whose numbers do not fit together: the family's checks name the field.
  EXPECT_EQ(error_of("family: gpt\nlayers: 2\nhidden: 100\nheads: 3\n"), "'heads' 3 does not divide 'hidden' 100");
  EXPECT_EQ(error_of("family: gpt\nlayers: 2\nhidden: 64\nheads: 4\nexperts: 8\n"), "family gpt has no 'experts'");
}

// A number too large for its field, or for a double, is out of range (the field and its range named), not
// "not a whole number" (found by the model fuzz target).
TEST(ParseModelYaml, ATooLargeNumberIsOutOfRangeNamingTheFieldAndItsRange) {
  for (const char* layers : {"5000", "1e16", "99999999999999999999", "1e400"})
    EXPECT_EQ(error_of(fmt::format("family: gpt\nlayers: {}\n", layers)),
              fmt::format("model file 'bad.yaml': field 'layers' is out of range: '{}' is not in [1, 1024] | give a "
                          "whole number from 1 to 1024 (Loom's limit)",
                          layers));
  EXPECT_EQ(error_of("family: gpt\nlayers: 2\nhidden: 9007199254740993\n"),
            "model file 'bad.yaml': field 'hidden' is out of range: '9007199254740993' is not in [1, 16777216] | give "
            "a whole number from 1 to 16777216 (Loom's limit)");
  EXPECT_TRUE(error_of("family: llama\nrope_base: 1e400\n")
                  .starts_with("model file 'bad.yaml': field 'rope_base' is out of range: '1e400' is beyond a double"));
  // At the limit the field is read; a fraction stays "not a whole number" however large.
  EXPECT_EQ(error_of("family: gpt\nlayers: 1024\nhidden: 64\nheads: 4\n"), "");
  EXPECT_TRUE(error_of("family: gpt\nlayers: 2.5\n")
                  .starts_with("model file 'bad.yaml': field 'layers' is not a whole number"));
}

TEST(LoadModelFile, ErrorsNameThePath) {
  auto missing = load_model_file("/no/such/model.yaml");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("/no/such/model.yaml"), std::string::npos);
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "loom_model_file_test_bad.yaml";
  std::ofstream(path) << "family: llama\nlayers: 2\nhidden: 64\nheads: 8\nkv_heads: 3\nffn: 96\n";
  auto bad = load_model_file(path.string());
  std::filesystem::remove(path);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            fmt::format("model file '{}': 'kv_heads' 3 does not divide 'heads' 8", path.string()));
}

}  // namespace
}  // namespace loom::frontend
