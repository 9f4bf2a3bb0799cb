// Reference kernels: a naive float64 forward and backward for every registry op type, the ground
// truth the interpreter runs the single-device Graph and the per-device ExecPlan with.
//
// A kernel sees its tensors as they are on one device: for a sub-op of a partitioned op, the inputs
// are slices of the FullTensors. `offsets` give each slice's start in its FullTensor (all zeros on a
// single device) and `full_shapes` the FullTensors' shapes, so that position-dependent ops compute the
// same values whatever the split: rotary embedding (sequence position), dropout (a counter-based mask
// keyed by the element's global index and the "seed" attr), embedding under a vocabulary split (row
// offset of the weight shard), causal attention (query and key positions).
#pragma once

#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/attribute.h"
#include "loom/verify/ndarray.h"

namespace loom::verify {

struct KernelContext {
  const ir::Attrs& attrs;
  std::span<const std::vector<std::int64_t>> input_offsets;   // per input, per dim; empty = all zero
  std::span<const ir::Shape> input_full_shapes;               // per input; empty = the local shapes
  std::span<const std::vector<std::int64_t>> output_offsets;  // per output
  std::span<const ir::Shape> output_full_shapes;
};

// outputs = forward(inputs)
using ForwardKernel =
    std::function<Expected<std::vector<NdArray>>(const KernelContext&, std::span<const NdArray> inputs)>;

// Gradients of every input (an empty NdArray{} where the input gets none: integer ids, labels,
// masks, no_grad_inputs). `grad_outputs[i]` is the gradient of output i; an output without a gradient
// is passed as zeros of its shape. `outputs` are the forward outputs (recomputed if the op did not save them).
using BackwardKernel = std::function<Expected<std::vector<NdArray>>(
    const KernelContext&, std::span<const NdArray> inputs, std::span<const NdArray> outputs,
    std::span<const NdArray> grad_outputs)>;

struct Kernel {
  ForwardKernel forward;
  BackwardKernel backward;  // empty for ops that are not differentiable
};

class KernelRegistry {
 public:
  void add(std::string type, Kernel kernel);  // a duplicate is a programming error and aborts
  const Kernel* find(std::string_view type) const;
  std::vector<std::string> types() const;

 private:
  std::map<std::string, Kernel, std::less<>> kernels_;
};

// All reference kernels, registered once (one function per op family, src/verify/kernels_<family>.cc).
const KernelRegistry& reference_kernels();

}  // namespace loom::verify
