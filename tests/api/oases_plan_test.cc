// The Oases planner on a job (api/oases_plan.h) and the per-layer degrees it plans: BERT-1.3B layers on a
// tp group of 4 RTX 3090s with Oases' overlap, where the lower-degree layers' activations move partly by
// transfers beside the overlapped collectives.
#include "loom/api/oases_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "bert_group.h"
#include "loom/api/job.h"

namespace loom::api {
namespace {

using testing::bert_group;

// The planner: its choice planned in full, the prediction beside the simulated step, the summary filled;
// twice the same plan.
TEST(OasesPlan, PlansItsChoiceInFullAndDeterministically) {
  JobOptions o = bert_group(4, "auto");
  std::optional<SearchSummary> first, second;
  Expected<std::unique_ptr<Job>> a = oases_plan(o, &first);
  ASSERT_TRUE(a.has_value()) << a.error().to_string();
  Expected<std::unique_ptr<Job>> b = oases_plan(o, &second);
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->baseline, "oases planner");
  EXPECT_EQ(first->slices, 12);  // degrees 1, 2, 4: 3 one-layer and 9 two-layer slices
  ASSERT_EQ(first->finalists.size(), 1u);
  const FinalistRow& row = first->finalists.front();
  EXPECT_TRUE(row.planned);
  EXPECT_DOUBLE_EQ(row.full_seconds, (*a)->metrics.step_time);
  // The additive model predicts the 4-layer step from 1- and 2-layer slices within 5 %.
  EXPECT_LT(std::abs(row.analytic_seconds / row.full_seconds - 1), 0.05) << first->why;
  EXPECT_NE((*a)->description.find("(oases planner)"), std::string::npos);
  EXPECT_EQ((*a)->description, (*b)->description);
  EXPECT_EQ(row.configuration, second->finalists.front().configuration);
  EXPECT_DOUBLE_EQ(row.full_seconds, second->finalists.front().full_seconds);
  // --policy oases is the same request.
  JobOptions policy = bert_group(4, "");
  policy.policy = "oases";
  policy.overlap = policy::Overlap::none;
  EXPECT_TRUE(uses_oases_planner(policy));
  Expected<std::unique_ptr<Job>> c = oases_plan(policy);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ((*c)->description, (*a)->description);
}

TEST(OasesPlan, RefusesWhatItCannotPrice) {
  JobOptions piped = bert_group(4, "auto");
  piped.tp = 2;
  piped.pp = 2;
  const Expected<std::unique_ptr<Job>> p = oases_plan(piped);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("pp is 2"), std::string::npos);
  JobOptions tight = bert_group(4, "auto");
  tight.model = "llama-65b";
  tight.global_batch = 64;
  const Expected<std::unique_ptr<Job>> t = oases_plan(tight);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().to_string().find("fits"), std::string::npos) << t.error().to_string();
}

}  // namespace
}  // namespace loom::api
