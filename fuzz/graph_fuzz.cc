// Graph files (--graph, --from FILE.json) and the bindings' traced graphs: frontend::load_graph_text, the
// reader load_graph_file calls on the file's bytes — the custom-op section, the sizes section, the JSON
// graph, annotations resolved and the graph validated against the catalog. Read as traced and resized
// to another batch (--global-batch). Law: a graph read back from its JSON is the same graph (graph_json.h).
#include "fuzz_input.h"
#include "loom/frontend/graph_file.h"
#include "loom/ir/graph_json.h"
#include "loom/ops/registry.h"

namespace {

void read_at(const std::string& text, std::int64_t batch) {
  loom::ops::CustomCatalog catalog(loom::ops::builtin_ops());
  const loom::Expected<loom::ir::Graph> graph = loom::frontend::load_graph_text(text, "<fuzz>", catalog, batch);
  if (!graph) return;
  const loom::Expected<loom::ir::Graph> again = loom::ir::graph_from_json(loom::ir::graph_to_json(*graph));
  LOOM_FUZZ_LAW(again && *again == *graph);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = loom::fuzz::text_of(data, size);
  read_at(text, 0);
  read_at(text, 6);
  return 0;
}
