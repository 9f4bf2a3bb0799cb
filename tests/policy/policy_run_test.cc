// Every built-in policy on the shrunk presets of the families `loom verify` covers: the plan validates
// and the plan interpreter's training step equals the single-device run (policy_test_support.h).
#include "policy_test_support.h"

namespace loom::policy {
namespace {

using testing::expect_trains_exactly;

// The smallest preset of each family (all shrink to the same architecture per family).
const char* const kPresets[] = {"gpt3-125m", "swin-1.8b", "t5-3.9b", "alphafold2-87m", "moe-380m"};

class PolicyRun : public ::testing::TestWithParam<const char*> {};

TEST_P(PolicyRun, DataParallel2) { expect_trains_exactly(GetParam(), "dp", {.dp = 2}); }

TEST_P(PolicyRun, TensorParallel2) { expect_trains_exactly(GetParam(), "tp", {.tp = 2}); }

TEST_P(PolicyRun, DataParallel2TimesTensorParallel2) { expect_trains_exactly(GetParam(), "dp-tp", {.dp = 2, .tp = 2}); }

TEST_P(PolicyRun, Pipeline2Stages4MicroBatches1F1B) {
  expect_trains_exactly(GetParam(), "pp", {.pp = 2, .micro_batches = 4, .schedule = plan::ScheduleKind::one_f_one_b});
}

// The shrunk sizes a policy splits are divisible by 4.
TEST_P(PolicyRun, DataParallel4) { expect_trains_exactly(GetParam(), "dp", {.dp = 4}); }

TEST_P(PolicyRun, TensorParallel4) { expect_trains_exactly(GetParam(), "tp", {.tp = 4}); }

INSTANTIATE_TEST_SUITE_P(Shrunk, PolicyRun, ::testing::ValuesIn(kPresets), [](const auto& info) {
  std::string name = info.param;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
});

// Beyond the matrix: GPipe, Megatron's full 3-D product, and the other language-model families.
TEST(PolicyRunMore, GPipeTwoStagesTwoMicroBatches) {
  expect_trains_exactly("gpt3-125m", "pp", {.pp = 2, .micro_batches = 2, .schedule = plan::ScheduleKind::gpipe});
}

TEST(PolicyRunMore, MegatronDp2Tp2Pp2) {
  expect_trains_exactly("gpt3-125m", "megatron", {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2});
}

TEST(PolicyRunMore, GroupedQueryAttentionPostLnAndEncoderDecoderUnderDpTp) {
  for (const char* preset : {"llama2-70b", "bert-large", "mbart-4.7b", "gpt3-13b"})
    expect_trains_exactly(preset, "dp-tp", {.dp = 2, .tp = 2});
}

}  // namespace
}  // namespace loom::policy
