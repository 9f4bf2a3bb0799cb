// policy::default_degrees: the degrees a job takes when the user gives none (api/resolve_request.h).
#include <gtest/gtest.h>

#include <algorithm>

#include "loom/policy/policy.h"

namespace loom::policy {
namespace {

TEST(DefaultDegrees, EveryDeviceIsUsedAndMegatronFillsANodeWithTp) {
  for (int n = 1; n <= 64; ++n) {
    SCOPED_TRACE(n);
    for (std::string_view policy : {"dp", "tp", "pp", "megatron", "zero"}) {
      auto config = default_degrees(policy, n);
      ASSERT_TRUE(config) << policy << ": " << config.error().to_string();
      EXPECT_EQ(device_count(*config), n) << policy;
      EXPECT_EQ(config->micro_batches, 1) << policy;  // resolved by the job, not the policy
    }
    const ParallelConfig megatron = default_degrees("megatron", n).value();
    EXPECT_LE(megatron.tp, 8);
    EXPECT_EQ(n % megatron.tp, 0);
    for (int larger = megatron.tp + 1; larger <= std::min(n, 8); ++larger) EXPECT_NE(n % larger, 0) << larger;
    EXPECT_EQ(default_degrees("tp", n).value().tp, n);
    EXPECT_EQ(default_degrees("pp", n).value().pp, n);
    const auto dp_tp = default_degrees("dp-tp", n);
    EXPECT_EQ(dp_tp.has_value(), n >= 4 && n % 2 == 0);
    if (dp_tp) {
      EXPECT_EQ(dp_tp->tp, 2);
    }
  }
  EXPECT_EQ(default_degrees("megatron", 16).value().dp, 2);
  EXPECT_EQ(default_degrees("megatron", 12).value().tp, 6);
  EXPECT_FALSE(default_degrees("dp", 0));
}

}  // namespace
}  // namespace loom::policy
