// Per-layer tensor-parallel degrees (policy/layer_degrees.h) with Oases' overlap on a job: BERT-1.3B
// layers on a tp group of 4 RTX 3090s, where the lower-degree layers' activations move partly by
// transfers beside the overlapped collectives.
#include <gtest/gtest.h>

#include <string>

#include "bert_group.h"
#include "loom/api/job.h"

namespace loom::api {
namespace {

using testing::bert_group;

// The boundary between a tp-2 and a tp-4 layer sums its gradient with reduce-scatter chains and
// transfers: the overlap pass moves no chain across a transfer (before, device 0's reduce-scatter moved
// ahead of its send, which device 1 waited on: a deadlock the ExecPlan check refused).
TEST(LayerTpJob, MixedDegreesWithOverlapPlanAndOverlap) {
  for (const char* spec : {"2x1,4x1", "4x1,2x1", "2x2"}) {
    SCOPED_TRACE(spec);
    Expected<std::unique_ptr<Job>> job = plan_job(bert_group(2, spec));
    ASSERT_TRUE(job.has_value()) << job.error().to_string();
    EXPECT_GT((*job)->passes.overlapped, 20);
    EXPECT_NE((*job)->description.find(std::string("tp layers ") + spec), std::string::npos);
  }
}

}  // namespace
}  // namespace loom::api
