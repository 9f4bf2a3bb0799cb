#include "loom/verify/graph_interpreter.h"

#include <algorithm>
#include <string_view>

#include "loom/ir/autograd.h"
#include "loom/ir/derived_input.h"
#include "loom/ir/leaf_values.h"
#include "loom/ops/custom_ops.h"

namespace loom::verify {
namespace {

std::uint64_t mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// FNV-1a: the tensor's name, not its id, keys its values, so renumbering a graph keeps them.
std::uint64_t hash_name(std::string_view name) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return h;
}

// Uniform in [0, 1) for element `index` of the tensor keyed by (seed, name).
double uniform(std::uint64_t seed, std::uint64_t name_key, std::int64_t index) {
  const std::uint64_t z = mix(mix(seed ^ name_key) ^ mix(static_cast<std::uint64_t>(index)));
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

bool has_value(const NdArray& value, const ir::FullTensor& tensor) {
  return value.shape == tensor.shape && value.data.size() == static_cast<std::size_t>(tensor.shape.numel());
}

std::string op_context(const ir::Op& op) { return fmt::format("op '{}' ({}, #{})", op.name, op.type, op.id.index()); }

Expected<std::vector<NdArray>> gather(const ir::Graph& graph, const std::vector<NdArray>& values,
                                      const std::vector<ir::TensorId>& ids, const ir::Op& op) {
  std::vector<NdArray> result;
  for (ir::TensorId id : ids) {
    const ir::FullTensor& tensor = graph.tensor(id);
    if (!has_value(values[id.index()], tensor))
      return failf("{}: input '{}' {} has no value", op_context(op), tensor.name, tensor.shape.to_string());
    result.push_back(values[id.index()]);
  }
  return result;
}

// Runs a backward op with the backward kernel of the op it mirrors, under the forward op's attrs.
Expected<std::vector<NdArray>> run_mirror(const ir::Graph& graph, const std::vector<NdArray>& values, const ir::Op& op,
                                          const KernelRegistry& kernels) {
  const ir::Op& forward = graph.op(op.mirror_of);
  const Kernel* kernel = kernels.find(forward.type);
  if (kernel == nullptr || !kernel->backward) return failf("{}: no reference backward kernel for '{}'", op_context(op), forward.type);
  LOOM_ASSIGN_OR_RETURN(ir::MirrorLayout layout, ir::mirror_layout(op));
  const std::size_t saved = (layout.saved_inputs ? forward.inputs.size() : 0) + (layout.saved_outputs ? forward.outputs.size() : 0);
  if (op.inputs.size() != saved + layout.grad_outputs.size() || op.outputs.size() != layout.grad_inputs.size())
    return failf("{}: inputs and outputs do not match its mirror layout", op_context(op));
  // Saved or not, the forward tensors already hold their values on one device (no recompute needed).
  LOOM_ASSIGN_OR_RETURN(std::vector<NdArray> inputs, gather(graph, values, forward.inputs, op));
  LOOM_ASSIGN_OR_RETURN(std::vector<NdArray> outputs, gather(graph, values, forward.outputs, op));
  std::vector<NdArray> grad_outputs;
  for (const NdArray& out : outputs) grad_outputs.emplace_back(out.shape);
  for (std::size_t g = 0; g < layout.grad_outputs.size(); ++g) {
    const auto k = static_cast<std::size_t>(layout.grad_outputs[g]);
    if (k >= grad_outputs.size()) return failf("{}: grad_outputs names output {} of {}", op_context(op), k, grad_outputs.size());
    const std::vector<ir::TensorId> grad_id = {op.inputs[saved + g]};
    LOOM_ASSIGN_OR_RETURN(std::vector<NdArray> grad, gather(graph, values, grad_id, op));
    grad_outputs[k] = std::move(grad[0]);
  }
  const KernelContext ctx{forward.attrs, {}, {}, {}, {}};
  LOOM_ASSIGN_OR_RETURN(std::vector<NdArray> grads, with_context(kernel->backward(ctx, inputs, outputs, grad_outputs), op_context(op)));
  std::vector<NdArray> result;
  for (int input : layout.grad_inputs) {
    if (input < 0 || static_cast<std::size_t>(input) >= grads.size() || grads[static_cast<std::size_t>(input)].data.empty())
      return failf("{}: the kernel gives no gradient for forward input {}", op_context(op), input);
    result.push_back(std::move(grads[static_cast<std::size_t>(input)]));
  }
  return result;
}

Expected<std::vector<NdArray>> run_plain(const ir::Graph& graph, const std::vector<NdArray>& values, const ir::Op& op,
                                         const KernelRegistry& kernels) {
  const Kernel* kernel = kernels.find(op.type);
  if (kernel == nullptr)
    return fail(fmt::format("{}: no reference kernel for '{}'", op_context(op), op.type), ops::no_reference_kernel_hint(op.type));
  LOOM_ASSIGN_OR_RETURN(std::vector<NdArray> inputs, gather(graph, values, op.inputs, op));
  const KernelContext ctx{op.attrs, {}, {}, {}, {}};
  return with_context(kernel->forward(ctx, inputs), op_context(op));
}

}  // namespace

std::vector<NdArray> initial_values(const ir::Graph& graph, std::uint64_t seed, double scale) {
  std::vector<NdArray> values(graph.tensors.size());
  const std::vector<ir::OpId> producer = ir::producers(graph);
  const auto fill_random = [&](const ir::FullTensor& t) {
    NdArray a(t.shape);
    const std::uint64_t key = hash_name(t.name);
    for (std::size_t i = 0; i < a.data.size(); ++i) a.data[i] = scale * (2 * uniform(seed, key, static_cast<std::int64_t>(i)) - 1);
    return a;
  };
  // Masters copy their parameter: leaves first, then the copies.
  std::vector<std::pair<ir::TensorId, ir::TensorId>> masters;
  for (const ir::FullTensor& t : graph.tensors) {
    if (producer[t.id.index()].valid()) continue;
    if (!t.value.empty()) {
      NdArray a(t.shape);
      a.data = t.value;
      values[t.id.index()] = std::move(a);
    } else if (t.role == ir::TensorRole::optimizer_state) {
      const ir::TensorId param = ir::master_copy_of(graph, t.id);
      if (param.valid()) masters.emplace_back(t.id, param);
      values[t.id.index()] = NdArray(t.shape);
    } else if (ir::is_floating(t.dtype)) {
      values[t.id.index()] = fill_random(t);
    } else {
      const std::int64_t bound = ir::integer_bound(graph, t.id);
      NdArray a(t.shape);
      const std::uint64_t key = hash_name(t.name);
      for (std::size_t i = 0; i < a.data.size(); ++i)
        a.data[i] = std::min(static_cast<double>(bound - 1), std::floor(uniform(seed, key, static_cast<std::int64_t>(i)) * static_cast<double>(bound)));
      values[t.id.index()] = std::move(a);
    }
  }
  for (auto [master, param] : masters) values[master.index()] = values[param.index()];
  fill_derived_inputs(graph, values);
  return values;
}

void fill_derived_inputs(const ir::Graph& graph, std::vector<NdArray>& values) {
  for (const ir::FullTensor& t : graph.tensors) {
    if (!t.derived) continue;
    const NdArray& labels = values[t.derived->from.index()];
    values[t.id.index()] = NdArray(t.shape, ir::counted_tokens(*t.derived, labels.shape, labels.data));
  }
}

Expected<std::vector<NdArray>> run_graph(const ir::Graph& graph, std::vector<NdArray> values, const KernelRegistry& kernels) {
  values.resize(graph.tensors.size());
  for (const ir::Op& op : graph.ops) {
    Expected<std::vector<NdArray>> outputs =
        op.is_mirror() ? run_mirror(graph, values, op, kernels) : run_plain(graph, values, op, kernels);
    if (!outputs) return std::unexpected(outputs.error());
    if (outputs->size() != op.outputs.size())
      return failf("{}: the kernel gives {} outputs, the op has {}", op_context(op), outputs->size(), op.outputs.size());
    for (std::size_t k = 0; k < op.outputs.size(); ++k) {
      const ir::FullTensor& tensor = graph.tensor(op.outputs[k]);
      NdArray& value = (*outputs)[k];
      if (value.shape != tensor.shape)
        return failf("{}: output '{}' has shape {}, the graph says {}", op_context(op), tensor.name, value.shape.to_string(),
                     tensor.shape.to_string());
      values[op.outputs[k].index()] = std::move(value);
    }
  }
  return values;
}

}  // namespace loom::verify
