// Plan files (plan.json, what `loom plan` writes): plan::plan_from_json against the training graph they were
// written for, then plan::validate_plan, as a reader of a plan must call it. The graph is fuzz/plan_graph.json
// (`loom graph --model gpt3-125m --shrink --layers 1 --json`); the seeds are `loom plan --graph` of its
// forward graph. Law: a plan read back from its JSON prints the same JSON.
#include "fuzz_input.h"
#include "loom/frontend/graph_file.h"
#include "loom/ops/registry.h"
#include "loom/plan/plan_json.h"
#include "loom/plan/validate.h"

namespace {

const loom::ir::Graph& plan_graph() {
  static const loom::ir::Graph graph = [] {
    loom::Expected<loom::ir::Graph> read =
        loom::frontend::load_graph_file(LOOM_FUZZ_DIR "/plan_graph.json", loom::ops::builtin_ops());
    if (!read) loom::fuzz::law_broken("fuzz/plan_graph.json reads");
    return *std::move(read);
  }();
  return graph;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = loom::fuzz::text_of(data, size);
  const loom::ir::Graph& graph = plan_graph();
  const loom::Expected<loom::plan::Plan> plan =
      loom::plan::plan_from_json(text, graph, loom::ops::builtin_ops(), "<fuzz>");
  if (!plan) return 0;
  const std::string printed = loom::plan::plan_to_json(*plan);
  const auto again = loom::plan::plan_from_json(printed, graph, loom::ops::builtin_ops(), "<printed>");
  LOOM_FUZZ_LAW(again && loom::plan::plan_to_json(*again) == printed);
  (void)loom::plan::validate_plan(*plan, 8);
  return 0;
}
