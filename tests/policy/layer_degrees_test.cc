// Per-layer tensor-parallel degrees (policy/layer_degrees.h, ParallelConfig::layer_tp): the spec's text
// form and its errors, and megatron plans whose layers run at different degrees inside one tp group,
// placed as data-parallel copies and training exactly as one device.
#include "loom/policy/layer_degrees.h"

#include <gtest/gtest.h>

#include <set>

#include "policy_test_support.h"

namespace loom::policy {
namespace {

using testing::apply_error;
using testing::expect_mentions;
using testing::expect_trains_exactly;
using testing::parts_of;
using testing::planned;

TEST(ParseLayerDegrees, ReadsRunsAndPrintsThemBack) {
  const Expected<std::vector<DegreeRun>> runs = parse_layer_degrees("2x8,4x16");
  ASSERT_TRUE(runs.has_value()) << runs.error().to_string();
  EXPECT_EQ(*runs, (std::vector<DegreeRun>{{2, 8}, {4, 16}}));
  EXPECT_EQ(to_string(*runs), "2x8,4x16");
  const std::vector<int> per_layer = expand(*runs);
  EXPECT_EQ(per_layer.size(), 24u);
  EXPECT_EQ(per_layer[7], 2);
  EXPECT_EQ(per_layer[8], 4);
  EXPECT_EQ(runs_of(per_layer), *runs);
  // Neighbouring runs of one degree merge.
  EXPECT_EQ(to_string(runs_of(expand(*parse_layer_degrees("2x1,2x2,4x1")))), "2x3,4x1");
}

TEST(ParseLayerDegrees, ErrorsNameTheRunAndTheForm) {
  for (const auto& [text, words] : std::vector<std::pair<std::string, std::vector<std::string_view>>>{
           {"", {"empty"}},
           {"2x8,", {"run ''", "DEGREExLAYERS"}},
           {"2-8", {"'2-8'", "DEGREExLAYERS"}},
           {"0x8", {"degree '0'"}},
           {"2x", {"layer count ''"}},
           {"2xa", {"layer count 'a'"}},
           {"2x8,4x16x1", {"layer count '16x1'"}}}) {
    SCOPED_TRACE(text);
    const Expected<std::vector<DegreeRun>> runs = parse_layer_degrees(text);
    ASSERT_FALSE(runs.has_value());
    for (std::string_view w : words) EXPECT_NE(runs.error().message.find(w), std::string::npos) << runs.error().message;
    EXPECT_NE(runs.error().hint.find("2x8,4x16"), std::string::npos);
  }
}

TEST(CheckLayerDegrees, DegreesDivideTheGroupAndCountsCoverTheLayers) {
  EXPECT_TRUE(check_layer_degrees(expand(*parse_layer_degrees("2x8,4x16")), 4, 24).has_value());
  const Error short_runs = check_layer_degrees(expand(*parse_layer_degrees("2x8,4x15")), 4, 24).error();
  expect_mentions(short_runs, {"2x8,4x15", "23 layers", "24"});
  const Error bad_degree = check_layer_degrees(expand(*parse_layer_degrees("3x8,4x16")), 4, 24).error();
  expect_mentions(bad_degree, {"layer 0", "degree 3", "tp group 4"});
}

// GPT's 2 shrunk layers at tp 2 and 4 in a group of 4: layer 0's fc1 runs as 2 copies of tp 2 (devices
// 0, 1 on the first half of the batch, 2, 3 on the second), layer 1's as tp 4 on the whole batch.
TEST(MegatronLayerTp, LowerDegreeLayersRunAsCopiesInsideTheGroup) {
  const ParallelConfig config{.tp = 4, .layer_tp = {2, 4}};
  const plan::Plan p = planned("gpt3-125m", "megatron", config);
  const auto fc1_0 = parts_of(p, "layers.0.mlp.fc1");
  const auto fc1_1 = parts_of(p, "layers.1.mlp.fc1");
  ASSERT_EQ(fc1_0.size(), 4u);
  ASSERT_EQ(fc1_1.size(), 4u);
  std::set<int> devices;
  for (const plan::SubOp* s : fc1_0) devices.insert(s->device);
  EXPECT_EQ(devices, (std::set<int>{0, 1, 2, 3}));
  // Layer 0: devices 0 and 1 hold the same rows (a copy), devices 0 and 2 different halves of the batch.
  const auto rows = [](const plan::SubOp* s) { return s->inputs[0].box[0]; };
  const auto on = [](const std::vector<const plan::SubOp*>& parts, int device) {
    for (const plan::SubOp* s : parts)
      if (s->device == device) return s;
    return static_cast<const plan::SubOp*>(nullptr);
  };
  EXPECT_EQ(rows(on(fc1_0, 0)), rows(on(fc1_0, 1)));
  EXPECT_EQ(rows(on(fc1_0, 0)).size() * 2, rows(on(fc1_1, 0)).size());
  EXPECT_LE(rows(on(fc1_0, 0)).stop, rows(on(fc1_0, 2)).start);
  EXPECT_EQ(rows(on(fc1_1, 0)), rows(on(fc1_1, 3)));
}

TEST(MegatronLayerTp, MixedDegreesTrainExactly) {
  expect_trains_exactly("gpt3-125m", "megatron", {.tp = 4, .layer_tp = {2, 4}});
  expect_trains_exactly("gpt3-125m", "megatron", {.tp = 4, .layer_tp = {4, 1}});
  expect_trains_exactly("gpt3-125m", "megatron", {.dp = 2, .tp = 2, .layer_tp = {1, 2}});
  expect_trains_exactly("llama3-8b", "megatron", {.tp = 2, .layer_tp = {1, 2}});
  expect_trains_exactly("llama3-8b", "megatron", {.tp = 2, .micro_batches = 2, .layer_tp = {2, 1}});
}

TEST(MegatronLayerTp, ErrorsNameTheSpec) {
  expect_mentions(apply_error("gpt3-125m", "megatron", {.tp = 4, .layer_tp = {2, 4, 4}}),
                  {"2x1,4x2", "3 layers", "has 2"});
  expect_mentions(apply_error("gpt3-125m", "megatron", {.tp = 4, .layer_tp = {3, 4}}), {"degree 3", "tp group 4"});
  expect_mentions(apply_error("gpt3-125m", "megatron", {.dp = 2, .tp = 2, .zero = 1, .layer_tp = {1, 2}}),
                  {"1x1,2x1", "ZeRO"});
}

}  // namespace
}  // namespace loom::policy
