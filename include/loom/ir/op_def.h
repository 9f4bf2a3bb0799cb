// What the engine knows about an operator type: its annotation (from which shapes, splits and the
// backward op derive), attribute schema, cost formulas and backward rule. The `ops` library holds
// the table; `ir` defines the record and the OpCatalog interface so that graph building, autograd and
// validation depend on the interface, not on the table.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/annotation.h"
#include "loom/ir/attribute.h"
#include "loom/ir/dtype.h"
#include "loom/ir/shape.h"
#include "loom/ir/shape_inference.h"

namespace loom::ir {

// The cost class selects an efficiency curve in the cost model.
enum class OpClass : std::uint8_t {
  contraction,    // matmul-like: FLOP-bound
  elementwise,    // memory-bound pointwise
  reduction,      // sums, means, softmax-like
  normalization,  // layer / rms / batch norm
  attention,      // fused attention kernels
  convolution,
  data_movement,  // reshape, permute, concat: no FLOPs
  embedding,      // gathers
  loss,
  optimizer,
};
std::string_view name(OpClass op_class);

// What a signature function sees of a call.
struct OpCall {
  const Attrs& attrs;
  std::span<const Shape> input_shapes;
  std::span<const DType> input_dtypes;
};

// An instance's annotation, plus what the inputs alone cannot tell.
struct OpSignature {
  std::string annotation;
  SizeMap sizes;                     // identifier sizes taken from attributes
  std::vector<DType> output_dtypes;  // empty: every output takes the first floating input's dtype
};

// What cost formulas see of a resolved instance.
struct OpInstance {
  const Attrs& attrs;
  std::span<const Shape> inputs;
  std::span<const Shape> outputs;
  std::span<const DType> input_dtypes;
  std::span<const DType> output_dtypes;
  const DimBinding& dims;
};

using SignatureFn = std::function<Expected<OpSignature>(const OpCall&)>;
using CostFn = std::function<double(const OpInstance&)>;

struct AttrSpec {
  std::string name;
  AttrKind kind = AttrKind::integer;
  bool required = false;
  std::string doc;
};

// How the backward pass treats the op. A differentiable op gets exactly one backward op that
// mirrors it; its inputs are the saved tensors plus the output gradients, its outputs the input
// gradients.
struct BackwardRule {
  bool differentiable = true;
  std::vector<int> no_grad_inputs;  // indices, masks, labels: no gradient flows to them
  bool saves_inputs = true;         // the backward op reads the forward inputs
  bool saves_outputs = false;       // the backward op reads the forward outputs (softmax, relu)
  double flops_factor = 2.0;        // backward FLOPs = factor x forward FLOPs
};

struct OpDef {
  std::string type;     // "matmul"
  std::string family;   // "linalg"
  std::string summary;  // one line for `loom ops` and error messages
  OpClass op_class = OpClass::elementwise;
  std::vector<AttrSpec> attrs;
  SignatureFn signature;
  CostFn flops;  // forward FLOPs of one instance
  CostFn bytes;  // forward memory traffic; when empty, inputs read plus outputs written
  BackwardRule backward;
  // Inputs added to the result after every reduction (biases). When a plan splits a '+' identifier
  // they lack, they become value parts like the outputs, so the parts' sum adds them once; every other
  // input lacking the identifier is replicated (it multiplies, so each partial product needs it whole).
  std::vector<int> additive_inputs;
  // Inputs read for their shape alone (fill_like): no data dependency, nothing to communicate. The
  // loss-gradient seed reads the loss this way, so backward passes need not wait for every micro-batch.
  std::vector<int> shape_only_inputs;
  // The outputs are a linear function of all inputs jointly (a sum): value parts k of every input give
  // value part k of the outputs, so plans may split the op by value (plan::ValueSplitAlgo).
  bool linear = false;
};

// Looks up operator definitions by type. Implemented by ops::OpRegistry.
class OpCatalog {
 public:
  virtual ~OpCatalog() = default;
  virtual const OpDef* find(std::string_view type) const = 0;
};

// An instance resolved against its definition.
struct ResolvedOp {
  Annotation annotation;
  std::string annotation_text;
  DimBinding dims;
  std::vector<Shape> output_shapes;
  std::vector<DType> output_dtypes;
};

// Checks the attributes against the schema (unknown, missing or mistyped ones are errors), builds the
// signature, parses its annotation and infers the output shapes and dtypes.
Expected<ResolvedOp> resolve_op(const OpDef& def, const Attrs& attrs, std::span<const Shape> input_shapes,
                                std::span<const DType> input_dtypes);

// Forward FLOPs and bytes of a resolved instance (bytes default to inputs + outputs).
double forward_flops(const OpDef& def, const Attrs& attrs, std::span<const Shape> input_shapes,
                     std::span<const DType> input_dtypes, const ResolvedOp& resolved);
double forward_bytes(const OpDef& def, const Attrs& attrs, std::span<const Shape> input_shapes,
                     std::span<const DType> input_dtypes, const ResolvedOp& resolved);

// Building blocks for definitions.
SignatureFn fixed_signature(std::string annotation);                 // the same annotation for every call
CostFn contraction_flops();                                          // 2 x the iteration space (multiply-add)
CostFn flops_per_output_element(double per_element);                 // k x numel(outputs[0])
CostFn flops_per_input_element(double per_element);                  // k x numel(inputs[0])
CostFn no_flops();

}  // namespace loom::ir
