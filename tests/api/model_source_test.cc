// api/resolve_request.h's model sources: --model, --model-file and --arch reach the same preset builder
// (model_preset_of, build_model_of), with the flags' Megatron-LM aliases, and their errors name the flag.
#include <gtest/gtest.h>

#include "loom/api/resolve_request.h"
#include "loom/ir/graph_json.h"

namespace loom::api {
namespace {

// The graph's JSON with its name replaced: --arch names its graph after the family.
std::string json_named(ir::Graph graph, const std::string& name) {
  graph.name = name;
  return ir::graph_to_json(graph);
}

JobOptions with_flags(std::initializer_list<std::pair<std::string_view, std::string_view>> flags) {
  JobOptions o;
  for (const auto& [flag, text] : flags) {
    Expected<void> set = set_option(o, flag, text);
    EXPECT_TRUE(set) << flag << ": " << set.error().to_string();
  }
  return o;
}

TEST(ModelPresetOf, ArchFlagsBuildThePresetsGraph) {
  JobOptions preset;
  preset.model = "llama2-70b";
  preset.layers = 2;
  preset.global_batch = 2;
  // Megatron-LM's spellings of the same numbers.
  const JobOptions arch = with_flags({{"--arch", "llama"}, {"--num-layers", "2"}, {"--hidden-size", "8192"},
                                      {"--num-attention-heads", "64"}, {"--num-query-groups", "8"},
                                      {"--ffn-hidden-size", "28672"}, {"--vocab", "32000"}, {"--seq-length", "4096"},
                                      {"--norm-epsilon", "1e-5"}, {"--global-batch-size", "2"}});
  ASSERT_TRUE(check_options(arch));
  EXPECT_EQ(arch_spec_of(arch).layers, 2);
  EXPECT_EQ(model_options_of(arch).layers, 0);  // the depth is the spec's, not an override
  auto expected = build_model_of(preset);
  auto built = build_model_of(arch);
  ASSERT_TRUE(expected) << expected.error().to_string();
  ASSERT_TRUE(built) << built.error().to_string();
  EXPECT_EQ(built->name, "llama");
  EXPECT_EQ(json_named(*built, "llama2-70b"), ir::graph_to_json(*expected));
}

TEST(ModelPresetOf, ModelFileBuildsThePresetsGraph) {
  JobOptions preset;
  preset.model = "t5-3.9b";
  preset.layers = 2;
  preset.global_batch = 2;
  JobOptions file = preset;
  file.model.clear();
  file.model_file = std::string(LOOM_SOURCE_DIR) + "/models/t5-3.9b.yaml";
  auto expected = build_model_of(preset);
  auto built = build_model_of(file);
  ASSERT_TRUE(expected) << expected.error().to_string();
  ASSERT_TRUE(built) << built.error().to_string();
  EXPECT_EQ(ir::graph_to_json(*built), ir::graph_to_json(*expected));
  EXPECT_EQ(model_label(file), file.model_file);
}

TEST(ModelPresetOf, ErrorsNameTheFlag) {
  JobOptions o = with_flags({{"--arch", "bert"}, {"--layers", "2"}, {"--hidden", "64"}, {"--heads", "4"},
                             {"--kv-heads", "2"}});
  auto preset = model_preset_of(o);
  ASSERT_FALSE(preset);
  EXPECT_EQ(preset.error().message, "--arch bert: family bert has no --kv-heads");

  o = with_flags({{"--model", "gpt3-125m"}, {"--experts", "4"}});
  auto checked = check_options(o);
  ASSERT_FALSE(checked);
  EXPECT_EQ(checked.error().message, "--experts describes an architecture, but no --arch FAMILY is given");

  o = with_flags({{"--model", "gpt3-125m"}, {"--arch", "gpt"}});
  EXPECT_FALSE(check_options(o));

  JobOptions bad;
  EXPECT_FALSE(set_option(bad, "--hidden", "0"));
  EXPECT_FALSE(set_option(bad, "--rope-base", "-1"));
  EXPECT_EQ(bad.arch, models::ModelSpec{});

  JobOptions typo;
  typo.model = "gpt3-1.3";
  auto unknown = model_preset_of(typo);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().message, "unknown model preset 'gpt3-1.3'");
  EXPECT_TRUE(unknown.error().hint.starts_with("did you mean 'gpt3-1.3b'?")) << unknown.error().hint;
}

}  // namespace
}  // namespace loom::api
