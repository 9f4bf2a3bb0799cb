#include "loom/plan/batch.h"

#include <map>

#include "loom/plan/primitives.h"

namespace loom::plan {

bool inside_merged_dim(const ir::Annotation& annotation, std::string_view x) {
  for (const auto* side : {&annotation.inputs, &annotation.outputs})
    for (const ir::TensorAnnotation& tensor : *side)
      for (const ir::AnnotatedDim& dim : tensor.dims)
        for (std::size_t a = 1; a < dim.atoms.size(); ++a)
          if (dim.atoms[a].kind == ir::DimAtom::Kind::identifier && dim.atoms[a].name == x) return true;
  return false;
}

std::vector<std::optional<std::string>> batch_identifiers(const Plan& plan) {
  const ir::Graph& graph = *plan.graph;
  std::vector<std::optional<std::string>> result(graph.ops.size());
  // Batch dimension of each tensor, -1 when unknown or absent.
  std::vector<int> batch_dim(graph.tensors.size(), -1);
  for (ir::TensorId in : graph.inputs)
    if (graph.tensor(in).shape.rank() > 0) batch_dim[in.index()] = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || plan.parts[op.id.index()].empty()) continue;
    // Any part of the op names the same annotation; dim_identifier needs only the op.
    const SubOpId any = plan.parts[op.id.index()].front();
    const ir::Annotation& annotation = plan.layouts[op.id.index()].annotation;  // read only: the '^' flag
    for (std::size_t i = 0; i < op.inputs.size() && !result[op.id.index()]; ++i) {
      const int d = batch_dim[op.inputs[i].index()];
      if (d < 0) continue;
      auto id = dim_identifier(plan, any, false, i, static_cast<std::size_t>(d));
      if (id && annotation.flag_of(*id) != ir::DimFlag::frozen && !inside_merged_dim(annotation, *id))
        result[op.id.index()] = std::move(id);
    }
    if (!result[op.id.index()]) continue;
    for (std::size_t j = 0; j < op.outputs.size(); ++j) {
      const std::size_t rank = graph.tensor(op.outputs[j]).shape.rank();
      for (std::size_t d = 0; d < rank; ++d)
        if (dim_identifier(plan, any, true, j, d) == result[op.id.index()]) {
          batch_dim[op.outputs[j].index()] = static_cast<int>(d);
          break;
        }
    }
  }
  return result;
}

std::vector<int> tensor_batch_dims(const Plan& plan, const std::vector<std::optional<std::string>>& batch) {
  const ir::Graph& graph = *plan.graph;
  std::vector<int> dims(graph.tensors.size(), -1);
  for (ir::TensorId in : graph.inputs)
    if (graph.tensor(in).shape.rank() > 0) dims[in.index()] = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || !batch[op.id.index()]) continue;
    const SubOpId any = plan.parts[op.id.index()].front();
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      for (std::size_t d = 0; d < graph.tensor(op.outputs[j]).shape.rank(); ++d)
        if (dim_identifier(plan, any, true, j, d) == batch[op.id.index()]) {
          dims[op.outputs[j].index()] = static_cast<int>(d);
          break;
        }
  }
  return dims;
}

BatchCoupling batch_coupling(const Plan& plan, const std::vector<std::optional<std::string>>& batch,
                             const std::vector<int>& batch_dims) {
  const ir::Graph& graph = *plan.graph;
  BatchCoupling out;
  std::map<std::uint32_t, ir::OpId> summed_over_batch;  // TensorId -> the op that wrote it
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    const std::optional<std::string>& x = batch[op.id.index()];
    if (!x) {
      for (ir::TensorId in : op.inputs)
        if (batch_dims[in.index()] >= 0) {
          out.whole_batch_readers.push_back({op.id, in});
          break;
        }
      continue;
    }
    if (plan.layouts[op.id.index()].annotation.flag_of(*x) == ir::DimFlag::reduce)
      for (ir::TensorId t : op.outputs) summed_over_batch.emplace(t.value, op.id);
  }
  for (const ir::Op& reader : graph.ops) {
    if (summed_over_batch.empty() || out.batch_sum) break;
    if (reader.pass != ir::Pass::forward || !batch[reader.id.index()]) continue;
    for (ir::TensorId in : reader.inputs)
      if (const auto it = summed_over_batch.find(in.value); it != summed_over_batch.end()) {
        out.batch_sum = BatchCoupling::BatchSum{it->second, reader.id};
        break;
      }
  }
  return out;
}

BatchCoupling batch_coupling(const Plan& plan) {
  const std::vector<std::optional<std::string>> batch = batch_identifiers(plan);
  return batch_coupling(plan, batch, tensor_batch_dims(plan, batch));
}

}  // namespace loom::plan
