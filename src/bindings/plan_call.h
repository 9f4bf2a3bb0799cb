// What `_loom_engine.plan(...)` runs: the api facade (api/plan_job.h, api/baseline_search.h) on a request,
// with the graph given as JSON text where the Python side traced it in memory.
#pragma once

#include <memory>
#include <string>

#include "loom/api/plan_job.h"

namespace loom::bindings {

// Plans `request` (a baseline's grid search for megatron-best / deepspeed-best). A non-empty `graph_json`
// is the graph itself (PlanRequest::graph_text), planned as `loom plan --graph` plans a file; errors name
// it "the graph JSON".
Expected<std::unique_ptr<api::PlanResult>> plan_call(api::PlanRequest request, const std::string& graph_json);

}  // namespace loom::bindings
