#include "sub_op_runner.h"

#include "loom/ir/autograd.h"
#include "loom/ops/custom_ops.h"

namespace loom::verify::detail {
namespace {

using plan::SubOp;
using plan::SubTensor;

std::string part_context(const SubOp& s, const ir::Op& op) {
  return fmt::format("sub-op '{}' ({}, ${})", s.name, op.type, s.id.value);
}

// Offsets and full shapes of the SubTensors a kernel sees, kept alive for a KernelContext's spans.
struct Placement {
  std::vector<std::vector<std::int64_t>> input_offsets, output_offsets;
  std::vector<ir::Shape> input_full, output_full;

  Placement(const ir::Graph& graph, const SubOp& part) {
    for (const SubTensor& t : part.inputs) add(graph, t, input_offsets, input_full);
    for (const SubTensor& t : part.outputs) add(graph, t, output_offsets, output_full);
  }
  KernelContext context(const ir::Attrs& attrs) const {
    return KernelContext{attrs, input_offsets, input_full, output_offsets, output_full};
  }

 private:
  static void add(const ir::Graph& graph, const SubTensor& t, std::vector<std::vector<std::int64_t>>& offsets,
                  std::vector<ir::Shape>& full) {
    std::vector<std::int64_t> starts;
    for (const plan::IndexRange& r : t.box) starts.push_back(r.start);
    offsets.push_back(std::move(starts));
    full.push_back(graph.tensor(t.tensor).shape);
  }
};

// Position-dependent kernels locate their slice by its start alone, which a strided box does not
// describe: (input or output, tensor, dim) of each op's position dims, dim -1 meaning every dim.
struct PositionDim {
  bool output;
  std::size_t tensor;
  int dim;
};
std::vector<PositionDim> position_dims(const ir::Op& forward) {
  if (forward.type == "dropout") return {{false, 0, -1}, {true, 0, -1}};
  if (forward.type == "rotary_embedding") return {{false, 0, 2}, {true, 0, 2}};
  if (forward.type == "embedding") return {{false, 1, 0}};
  if (forward.type == "scaled_dot_product_attention" && ir::get_bool_or(forward.attrs, "causal", false).value_or(false))
    return {{false, 0, 2}, {false, 1, 2}, {true, 0, 2}};
  return {};
}

Expected<void> check_position_strides(const ir::Op& forward, const SubOp& forward_part) {
  for (const PositionDim& p : position_dims(forward)) {
    const auto& side = p.output ? forward_part.outputs : forward_part.inputs;
    if (p.tensor >= side.size()) continue;
    const SubTensor& t = side[p.tensor];
    for (std::size_t d = 0; d < t.box.size(); ++d)
      if ((p.dim < 0 || static_cast<std::size_t>(p.dim) == d) && t.box[d].step > 1)
        return failf("sub-op '{}': strided splits of '{}' along a position dimension ({} {} dim {}: {}) are not supported by "
                     "the interpreter yet",
                     forward_part.name, forward.type, p.output ? "output" : "input", p.tensor, d, t.to_string());
  }
  return {};
}

// read_input with the shape its box promises: a reader handing a kernel a wrongly shaped array would
// otherwise surface as an index error deep inside the kernel.
Expected<NdArray> read_checked(const SubOp& s, std::size_t input, const InputReader& read_input) {
  LOOM_ASSIGN_OR_RETURN(NdArray value, read_input(input));
  const ir::Shape expected = s.inputs[input].local_shape();
  if (value.shape != expected)
    return failf("input {} has shape {}, its box {} says {}", input, value.shape.to_string(), s.inputs[input].to_string(),
                 expected.to_string());
  return value;
}

Expected<std::vector<NdArray>> run_forward_part(const plan::Plan& plan, const SubOp& s, const ir::Op& op,
                                                const KernelRegistry& kernels, const InputReader& read_input) {
  const Kernel* kernel = kernels.find(op.type);
  if (kernel == nullptr || !kernel->forward)
    return fail(fmt::format("no reference kernel for '{}'", op.type), ops::no_reference_kernel_hint(op.type));
  LOOM_RETURN_IF_ERROR(check_position_strides(op, s));
  // Shape-only inputs (the loss-gradient seed's loss) carry no data dependency: the plan may run
  // this part before their producers, so the kernel gets zeros of the right shape.
  const plan::OpLayout& layout = plan.layouts[s.op.index()];
  std::vector<NdArray> inputs;
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    if (layout.shape_only(i)) {
      inputs.emplace_back(s.inputs[i].local_shape());
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(NdArray value, read_checked(s, i, read_input));
    inputs.push_back(std::move(value));
  }
  const Placement placement(*plan.graph, s);
  return kernel->forward(placement.context(op.attrs), inputs);
}

// A backward part runs the backward kernel of the forward op's type under the forward op's attrs and
// the forward part's placement. Forward tensors the op does not save are passed as zeros (see below).
Expected<std::vector<NdArray>> run_backward_part(const plan::Plan& plan, const SubOp& s, const ir::Op& op,
                                                 const KernelRegistry& kernels, const InputReader& read_input) {
  const ir::Op& forward = plan.graph->op(op.mirror_of);
  const Kernel* kernel = kernels.find(forward.type);
  if (kernel == nullptr || !kernel->backward) return failf("no reference backward kernel for '{}'", forward.type);
  if (!s.mirror.valid()) return fail("the backward part has no forward part");
  const SubOp& forward_part = plan.sub_op(s.mirror);
  LOOM_RETURN_IF_ERROR(check_position_strides(forward, forward_part));
  LOOM_ASSIGN_OR_RETURN(ir::MirrorLayout layout, ir::mirror_layout(op));
  const std::size_t saved = (layout.saved_inputs ? forward_part.inputs.size() : 0) +
                            (layout.saved_outputs ? forward_part.outputs.size() : 0);
  if (s.inputs.size() != saved + layout.grad_outputs.size() || s.outputs.size() != layout.grad_inputs.size())
    return fail("inputs and outputs do not match its mirror layout");
  // Saved forward tensors are this part's own leading inputs. Tensors the op does not save get zeros
  // of their local shape: kernels may read their shapes (pooling, windows) but not their values, so an
  // op that needs unsaved values shows up here as a mismatch with the single-device run.
  std::size_t pos = 0;
  const auto saved_or_zeros = [&](bool is_saved, const std::vector<SubTensor>& forward_tensors) -> Expected<std::vector<NdArray>> {
    std::vector<NdArray> values;
    for (const SubTensor& t : forward_tensors) {
      if (!is_saved) {
        values.emplace_back(t.local_shape());
        continue;
      }
      LOOM_ASSIGN_OR_RETURN(NdArray value, read_checked(s, pos++, read_input));
      values.push_back(std::move(value));
    }
    return values;
  };
  LOOM_ASSIGN_OR_RETURN(std::vector<NdArray> inputs, saved_or_zeros(layout.saved_inputs, forward_part.inputs));
  LOOM_ASSIGN_OR_RETURN(std::vector<NdArray> outputs, saved_or_zeros(layout.saved_outputs, forward_part.outputs));
  std::vector<NdArray> grad_outputs;
  for (const SubTensor& out : forward_part.outputs) grad_outputs.emplace_back(out.local_shape());
  for (std::size_t g = 0; g < layout.grad_outputs.size(); ++g) {
    const auto k = static_cast<std::size_t>(layout.grad_outputs[g]);
    if (k >= grad_outputs.size()) return failf("grad_outputs names output {} of {}", k, grad_outputs.size());
    LOOM_ASSIGN_OR_RETURN(grad_outputs[k], read_checked(s, pos + g, read_input));
  }
  const Placement placement(*plan.graph, forward_part);
  LOOM_ASSIGN_OR_RETURN(std::vector<NdArray> grads,
                        kernel->backward(placement.context(forward.attrs), inputs, outputs, grad_outputs));
  std::vector<NdArray> result;
  for (int input : layout.grad_inputs) {
    if (input < 0 || static_cast<std::size_t>(input) >= grads.size() || grads[static_cast<std::size_t>(input)].data.empty())
      return failf("the kernel gives no gradient for forward input {}", input);
    result.push_back(std::move(grads[static_cast<std::size_t>(input)]));
  }
  return result;
}

}  // namespace

Expected<std::vector<NdArray>> run_sub_op(const plan::Plan& plan, const SubOp& s, const KernelRegistry& kernels,
                                          const InputReader& read_input) {
  const ir::Op& op = plan.graph->op(s.op);
  Expected<std::vector<NdArray>> outputs = op.is_mirror() ? run_backward_part(plan, s, op, kernels, read_input)
                                                          : run_forward_part(plan, s, op, kernels, read_input);
  if (!outputs) return std::unexpected(with_context(outputs.error(), part_context(s, op)));
  if (outputs->size() != s.outputs.size())
    return failf("{}: the kernel gives {} outputs, the sub-op has {}", part_context(s, op), outputs->size(), s.outputs.size());
  for (std::size_t k = 0; k < s.outputs.size(); ++k) {
    const ir::Shape expected = s.outputs[k].local_shape();
    if ((*outputs)[k].shape != expected)
      return failf("{}: output {} has shape {}, its box {} says {}", part_context(s, op), k, (*outputs)[k].shape.to_string(),
                   s.outputs[k].to_string(), expected.to_string());
  }
  return outputs;
}

}  // namespace loom::verify::detail
