#include "append_resolved_op.h"

namespace loom::ir {

Expected<std::vector<TensorId>> append_resolved_op(Graph& graph, const OpCatalog& catalog, Op op,
                                                   std::span<const OutputTensor> outputs) {
  const OpDef* def = catalog.find(op.type);
  if (def == nullptr)
    return fail(fmt::format("op '{}': op type '{}' is not in the catalog", op.name, op.type),
                "register it (ops::builtin_ops() holds the built-in types)");
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (TensorId in : op.inputs) {
    shapes.push_back(graph.tensor(in).shape);
    dtypes.push_back(graph.tensor(in).dtype);
  }
  Expected<ResolvedOp> resolved = resolve_op(*def, op.attrs, shapes, dtypes);
  if (!resolved) return std::unexpected(with_context(resolved.error(), fmt::format("op '{}' ({})", op.name, op.type)));
  if (resolved->output_shapes.size() != outputs.size())
    return fail(fmt::format("op '{}' ({}) has {} outputs, expected {}", op.name, op.type,
                            resolved->output_shapes.size(), outputs.size()));
  op.annotation = std::move(resolved->annotation_text);
  op.outputs.clear();
  for (std::size_t i = 0; i < outputs.size(); ++i)
    op.outputs.push_back(graph.add_tensor(FullTensor{{}, outputs[i].name, std::move(resolved->output_shapes[i]),
                                                     resolved->output_dtypes[i], outputs[i].role, outputs[i].owner,
                                                     outputs[i].updates}));
  std::vector<TensorId> ids = op.outputs;
  graph.add_op(std::move(op));
  return ids;
}

}  // namespace loom::ir
