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
  // Where the busiest device's step goes, as a search's row says it (0.000 each before: the row left them out).
  EXPECT_GT(row.full_compute, 0);
  EXPECT_NEAR(row.full_compute + row.full_exposed_communication + row.full_idle, row.full_seconds,
              1e-3 * row.full_seconds);
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

// Where the policy takes no lower degree (a batch of 2: Oases' two sub-batches leave one sample, and tp 2
// or 1 needs 2 or 4 copies of it), the space is the group's degree throughout: the planner prices no
// slice and plans the plain tp-4 plan. With a batch of 16 the lower degrees are in the space, and every
// slice is priced (PlansItsChoiceInFullAndDeterministically: 12).
TEST(OasesPlan, TakesTheOnlyDegreeTheBatchTakesWithoutPricingSlices) {
  JobOptions o = bert_group(4, "auto");
  o.global_batch = 2;
  for (const char* lower : {"1x4", "2x4"}) {
    JobOptions refused = o;
    refused.tp_layers = lower;
    const Expected<std::unique_ptr<Job>> r = plan_job(refused);
    ASSERT_FALSE(r.has_value()) << lower;
    EXPECT_NE(r.error().to_string().find("copies"), std::string::npos) << r.error().to_string();
  }
  const Expected<OasesLayerChoice> choice = oases_layer_degrees(o);
  ASSERT_TRUE(choice.has_value()) << choice.error().to_string();
  EXPECT_TRUE(choice->forced);
  EXPECT_TRUE(choice->uniform);
  EXPECT_EQ(choice->spec, "4x4");
  EXPECT_EQ(choice->failed, 2);
  std::optional<SearchSummary> summary;
  const Expected<std::unique_ptr<Job>> planned = oases_plan(o, &summary);
  ASSERT_TRUE(planned.has_value()) << planned.error().to_string();
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->slices, 0);
  JobOptions plain = o;
  plain.tp_layers.clear();
  const Expected<std::unique_ptr<Job>> uniform = plan_job(plain);
  ASSERT_TRUE(uniform.has_value()) << uniform.error().to_string();
  EXPECT_DOUBLE_EQ((*planned)->metrics.step_time, (*uniform)->metrics.step_time);
  EXPECT_EQ((*planned)->request.config.layer_tp, (*uniform)->request.config.layer_tp);

  JobOptions open = bert_group(4, "auto");
  const Expected<OasesLayerChoice> priced = oases_layer_degrees(open);
  ASSERT_TRUE(priced.has_value()) << priced.error().to_string();
  EXPECT_FALSE(priced->forced);
  EXPECT_EQ(priced->slices, 12);
  EXPECT_EQ(priced->failed, 0);
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
  // Forced to the group's degree (a batch of 2), the same refusal comes from the full plan: 16 layers of
  // LLaMA-65B at tp 4 hold ~51 GiB of model states per device.
  tight.global_batch = 2;
  tight.layers = 16;
  const Expected<std::unique_ptr<Job>> forced = oases_plan(tight);
  ASSERT_FALSE(forced.has_value());
  EXPECT_NE(forced.error().to_string().find("no choice of degrees fits"), std::string::npos)
      << forced.error().to_string();
  EXPECT_NE(forced.error().to_string().find("the only degree the batch takes"), std::string::npos);
}

}  // namespace
}  // namespace loom::api
