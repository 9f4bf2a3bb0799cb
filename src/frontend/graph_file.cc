// Graph files: the engine's JSON graph on disk. Reading parses, resolves missing annotations, then
// validates; writing goes through a temporary file renamed into place, so readers never see half a graph.
#include "loom/frontend/graph_file.h"

#include <variant>

#include <fmt/format.h>

#include "loom/core/atomic_file.h"
#include "loom/core/input_file.h"
#include "loom/frontend/custom_op_section.h"
#include "loom/frontend/graph_sizes.h"
#include "loom/ir/graph_json.h"
#include "loom/ir/graph_stats.h"
#include "loom/ir/validate.h"

namespace loom::frontend {
namespace {

Expected<std::string> read_file(const std::string& path) {
  return read_input_file(path, "graph file", "check the path; `loom graph --json` writes one");
}

// A custom op's call that does not resolve: its one attribute (the Python function the tracer records) is
// missing, of another kind or joined by others, else its annotation does not fit the call. The error names
// which, and the hint the fix for that one.
Expected<void> custom_call_error(const std::string& label, const ir::OpDef& def, const ir::Attrs& attrs,
                                 const Error& error) {
  const auto callable = attrs.find(ops::kCallableAttr);
  if (callable == attrs.end() || attrs.size() != 1 || !std::holds_alternative<std::string>(callable->second))
    return fail(fmt::format("{}: {}", label, error.message),
                fmt::format("give the op its one attribute, \"{}\": \"module:qualname\", naming the registered Python "
                            "function (the tracer writes it; docs/custom_ops.md)",
                            ops::kCallableAttr));
  return fail(fmt::format("{}: the {} cannot take this call: {}", label, def.summary, error.message),
              "fix the annotation given to loom.register_op: one tensor per tensor argument, one dim per dim");
}

// Ops written without an annotation (the Python tracer leaves it out: annotations are the registry's
// knowledge) get the one their type's signature gives for the recorded inputs and attributes; a
// backward op takes its forward op's. validate_graph then checks the outputs against it as for any op.
Expected<void> resolve_missing_annotations(ir::Graph& graph, const ir::OpCatalog& catalog) {
  for (ir::Op& op : graph.ops) {
    if (!op.annotation.empty() || op.mirror_of.valid()) continue;
    const std::string label = fmt::format("op '{}' (#{}, {})", op.name, op.id.value, op.type);
    const ir::OpDef* def = catalog.find(op.type);
    if (def == nullptr)
      return fail(fmt::format("{}: unknown op type '{}'", label, op.type), "`loom ops` lists the known types");
    std::vector<ir::Shape> shapes;
    std::vector<ir::DType> dtypes;
    for (ir::TensorId in : op.inputs) {
      shapes.push_back(graph.tensor(in).shape);
      dtypes.push_back(graph.tensor(in).dtype);
    }
    Expected<ir::ResolvedOp> resolved = ir::resolve_op(*def, op.attrs, shapes, dtypes);
    if (!resolved && op.type.starts_with(ops::kCustomOpPrefix))
      return custom_call_error(label, *def, op.attrs, resolved.error());
    if (!resolved) return std::unexpected(with_context(std::move(resolved).error(), label));
    op.annotation = std::move(resolved->annotation_text);
  }
  for (ir::Op& op : graph.ops)
    if (op.annotation.empty() && op.mirror_of.valid()) op.annotation = graph.op(op.mirror_of).annotation;
  return {};
}

// The graph at `batch` (0: as traced) from its sizes section; a graph without one only at its own batch.
Expected<void> resize(ir::Graph& graph, const std::optional<GraphSizes>& sizes, std::int64_t batch) {
  if (batch == 0) return {};
  if (sizes) return resize_graph(graph, *sizes, batch);
  if (batch == ir::batch_of(graph)) return {};
  return fail(fmt::format("the graph was traced at batch {} and does not record which of its sizes are the batch (no "
                          "\"sizes\" section), so it cannot be planned at --global-batch {}",
                          ir::batch_of(graph), batch),
              "trace it again with loom.trace (which records them), or drop --global-batch");
}

// Parses, resizes to `batch`, resolves and validates the graph text (without its custom-op section)
// against `catalog`.
Expected<ir::Graph> read_graph(const std::string& path, const std::string& text, const ir::OpCatalog& catalog,
                               std::int64_t batch) {
  Expected<SplitSizes> split = split_sizes(text);
  if (!split) return std::unexpected(with_context(std::move(split).error(), path));
  Expected<ir::Graph> graph = ir::graph_from_json(split->graph_json);
  if (!graph) return std::unexpected(with_context(std::move(graph).error(), path));
  if (Expected<void> resized = resize(*graph, split->sizes, batch); !resized)
    return std::unexpected(with_context(std::move(resized).error(), path));
  if (Expected<void> resolved = resolve_missing_annotations(*graph, catalog); !resolved)
    return std::unexpected(with_context(std::move(resolved).error(), path));
  if (Expected<void> valid = ir::validate_graph(*graph, catalog); !valid)
    return std::unexpected(with_context(std::move(valid).error(), path));
  return graph;
}

Expected<SplitGraphText> read_split(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return with_context(split_custom_ops(text), path);
}

}  // namespace

Expected<ir::Graph> load_graph_file(const std::string& path, const ir::OpCatalog& catalog, std::int64_t batch) {
  LOOM_ASSIGN_OR_RETURN(SplitGraphText split, read_split(path));
  if (!split.custom_ops.empty())
    return fail(fmt::format("{}: the graph uses custom ops ({} ...), which this command does not take", path,
                            split.custom_ops.front().type),
                "plan it with `loom plan --graph FILE` (docs/custom_ops.md)");
  return read_graph(path, split.graph_json, catalog, batch);
}

Expected<ir::Graph> load_graph_file(const std::string& path, ops::CustomCatalog& catalog, std::int64_t batch) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return load_graph_text(text, path, catalog, batch);
}

Expected<ir::Graph> load_graph_text(const std::string& text, const std::string& label, ops::CustomCatalog& catalog,
                                    std::int64_t batch) {
  LOOM_ASSIGN_OR_RETURN(SplitGraphText split, with_context(split_custom_ops(text), label));
  for (const ops::CustomOpSpec& spec : split.custom_ops)
    LOOM_RETURN_IF_ERROR(with_context(catalog.add(spec), label));
  return read_graph(label, split.graph_json, catalog, batch);
}

Expected<void> save_graph_file(const ir::Graph& graph, const std::string& path) {
  return write_file_atomically(path, ir::graph_to_json(graph), "the graph");
}

}  // namespace loom::frontend
