// Private to the interpreters: running one sub-op of a Plan with the reference kernels. The plan
// interpreter and the ExecPlan interpreter differ only in where a sub-op's inputs come from (pieces
// assembled on the fly, or the buffers a Compute instruction names), so the kernel call, the
// placement a position-dependent kernel needs and the output shape checks live here once.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "loom/core/error.h"
#include "loom/plan/plan.h"
#include "loom/verify/kernels.h"

namespace loom::verify::detail {

// The local values of sub-op input `input` (aligned with SubOp::inputs), of its box's shape.
using InputReader = std::function<Expected<NdArray>(std::size_t input)>;

// Runs a live sub-op: a forward (or non-mirror) part with its op's forward kernel, a backward part with
// the forward op's backward kernel under the forward part's placement. Inputs the kernel only needs
// the shape of get zeros without calling `read_input`: shape-only inputs of a forward part, and the
// forward tensors a backward op does not save. Returns the outputs aligned with SubOp::outputs, each
// of its box's shape. Errors name the sub-op: no kernel, a kernel error, an input or output of the
// wrong shape, or a strided split of a position-dependent op (which the offset-based KernelContext
// cannot describe).
Expected<std::vector<NdArray>> run_sub_op(const plan::Plan& plan, const plan::SubOp& sub_op, const KernelRegistry& kernels,
                                          const InputReader& read_input);

}  // namespace loom::verify::detail
