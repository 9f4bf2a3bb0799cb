#include "plan_call.h"

#include <fmt/format.h>

#include "loom/api/baseline_search.h"

namespace loom::bindings {

Expected<std::unique_ptr<api::PlanResult>> plan_call(api::PlanRequest request, const std::string& graph_json) {
  if (!graph_json.empty()) {
    if (!request.graph_file.empty() || !request.model.empty())
      return fail("give one of a model preset, a graph file or a graph JSON text", "pass only one of them");
    request.graph_text = graph_json;
  }
  if (!api::is_baseline(request.policy)) return api::plan_model(request);
  LOOM_ASSIGN_OR_RETURN(api::BaselineResult searched, api::best_baseline(request, request.policy));
  return std::move(searched.best);
}

}  // namespace loom::bindings
