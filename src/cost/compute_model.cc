#include "loom/cost/compute_model.h"

#include <algorithm>
#include <cassert>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_stats.h"

namespace loom::cost {
namespace {

// The dtype an op computes in: its first floating input's, else its first output's, else f32.
ir::DType op_dtype(const ir::Graph& graph, const plan::SubOp& sub_op) {
  for (const plan::SubTensor& in : sub_op.inputs)
    if (ir::is_floating(graph.tensor(in.tensor).dtype)) return graph.tensor(in.tensor).dtype;
  for (const plan::SubTensor& out : sub_op.outputs) return graph.tensor(out.tensor).dtype;
  return ir::DType::f32;
}

double piece_bytes(const ir::Graph& graph, const plan::SubTensor& piece) {
  return static_cast<double>(piece.numel() * ir::size_bytes(graph.tensor(piece.tensor).dtype));
}

}  // namespace

bool uses_tensor_cores(ir::OpClass op_class) {
  return op_class == ir::OpClass::contraction || op_class == ir::OpClass::attention ||
         op_class == ir::OpClass::convolution;
}

double efficiency(ir::OpClass op_class, double flops, const ComputeConstants& constants) {
  if (!uses_tensor_cores(op_class)) return constants.vector_efficiency;
  if (flops <= 0) return constants.tensor_core_efficiency;
  return constants.tensor_core_efficiency * flops / (flops + constants.half_efficiency_flops);
}

double ComputeConstants::bandwidth_efficiency(ir::OpClass op_class) const {
  switch (op_class) {
    case ir::OpClass::elementwise: return 0.81;
    case ir::OpClass::embedding: return 0.68;
    case ir::OpClass::optimizer: return 0.56;
    case ir::OpClass::normalization:
    case ir::OpClass::reduction: return 0.49;
    case ir::OpClass::data_movement: return 0.44;
    case ir::OpClass::loss: return 0.33;
    default: return 1.0;
  }
}

cluster::Precision precision_of(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::bf16: return cluster::Precision::bf16;
    case ir::DType::f16: return cluster::Precision::fp16;
    default: return cluster::Precision::fp32;
  }
}

Expected<ComputeModel> ComputeModel::make(const plan::Plan& plan, const ir::OpCatalog& catalog, cluster::GpuSpec gpu,
                                          const ProfileDb* profile, ComputeConstants constants) {
  assert(plan.graph != nullptr);
  ComputeModel model;
  LOOM_ASSIGN_OR_RETURN(model.op_flops_, ir::op_flops(*plan.graph, catalog));
  model.plan_ = &plan;
  model.catalog_ = &catalog;
  model.profile_ = profile;
  model.gpu_ = std::move(gpu);
  model.constants_ = constants;
  return model;
}

// The smallest local / whole element ratio over the sub-op's pieces (shape-only inputs excluded).
double ComputeModel::whole_fraction(const plan::SubOp& sub_op) const {
  const plan::OpLayout& layout = plan_->layouts[sub_op.op.index()];
  double fraction = 1;
  auto consider = [&](const plan::SubTensor& piece) {
    const std::int64_t whole = plan_->graph->tensor(piece.tensor).shape.numel();
    if (whole > 0) fraction = std::min(fraction, static_cast<double>(piece.numel()) / static_cast<double>(whole));
  };
  for (std::size_t i = 0; i < sub_op.inputs.size(); ++i)
    if (!layout.shape_only(i)) consider(sub_op.inputs[i]);
  for (const plan::SubTensor& out : sub_op.outputs) consider(out);
  return fraction;
}

double ComputeModel::flops_of(const plan::SubOp& sub_op) const {
  const ir::Graph& graph = *plan_->graph;
  const ir::Op& op = graph.op(sub_op.op);
  const ir::OpDef* def = catalog_->find(op.type);
  assert(def != nullptr);  // make() evaluated op_flops, which checks every type
  const plan::SubOp* forward = &sub_op;
  double factor = 1;
  if (op.is_mirror()) {
    if (!sub_op.mirror.valid()) return op_flops_[sub_op.op.index()] * whole_fraction(sub_op);
    forward = &plan_->sub_op(sub_op.mirror);
    factor = def->backward.flops_factor * ir::flops_share(ir::grad_part(op));
  }
  const ir::Op& forward_op = graph.op(forward->op);
  std::vector<ir::Shape> shapes;
  std::vector<ir::DType> dtypes;
  for (const plan::SubTensor& in : forward->inputs) {
    shapes.push_back(in.local_shape());
    dtypes.push_back(graph.tensor(in.tensor).dtype);
  }
  Expected<ir::ResolvedOp> resolved = ir::resolve_op(*def, forward_op.attrs, shapes, dtypes);
  if (!resolved) return op_flops_[sub_op.op.index()] * whole_fraction(sub_op);
  return factor * ir::forward_flops(*def, forward_op.attrs, shapes, dtypes, *resolved);
}

double ComputeModel::bytes_of(const plan::SubOp& sub_op) const {
  const ir::Graph& graph = *plan_->graph;
  const ir::Op& op = graph.op(sub_op.op);
  const ir::OpDef* def = catalog_->find(op.type);
  if (def != nullptr && def->bytes && !op.is_mirror()) {
    std::vector<ir::Shape> shapes;
    std::vector<ir::DType> dtypes;
    for (const plan::SubTensor& in : sub_op.inputs) {
      shapes.push_back(in.local_shape());
      dtypes.push_back(graph.tensor(in.tensor).dtype);
    }
    if (Expected<ir::ResolvedOp> resolved = ir::resolve_op(*def, op.attrs, shapes, dtypes))
      return ir::forward_bytes(*def, op.attrs, shapes, dtypes, *resolved);
  }
  const plan::OpLayout& layout = plan_->layouts[sub_op.op.index()];
  double bytes = 0;
  for (std::size_t i = 0; i < sub_op.inputs.size(); ++i)
    if (!layout.shape_only(i)) bytes += piece_bytes(graph, sub_op.inputs[i]);
  for (const plan::SubTensor& out : sub_op.outputs) bytes += piece_bytes(graph, out);
  return bytes;
}

ProfileKey ComputeModel::profile_key(plan::SubOpId id) const {
  const plan::SubOp& sub_op = plan_->sub_op(id);
  const ir::Op& op = plan_->graph->op(sub_op.op);
  ProfileKey key{.op = op.is_mirror() ? op.type + "/backward" : op.type,
                 .shapes = {},
                 .dtype = op_dtype(*plan_->graph, sub_op),
                 .device = gpu_.name};
  for (const plan::SubTensor& in : sub_op.inputs) key.shapes.push_back(in.local_shape());
  return key;
}

// A 16-bit tensor-core op with an operand or result whose last local dimension is not a multiple of 8.
bool ComputeModel::misaligned(const plan::SubOp& sub_op) const {
  const ir::Graph& graph = *plan_->graph;
  if (ir::size_bytes(op_dtype(graph, sub_op)) != 2) return false;
  const auto bad = [](const plan::SubTensor& piece) {
    const ir::Shape local = piece.local_shape();
    return local.rank() > 0 && local[local.rank() - 1] % 8 != 0;
  };
  const plan::OpLayout& layout = plan_->layouts[sub_op.op.index()];
  for (std::size_t i = 0; i < sub_op.inputs.size(); ++i)
    if (!layout.shape_only(i) && ir::is_floating(graph.tensor(sub_op.inputs[i].tensor).dtype) && bad(sub_op.inputs[i]))
      return true;
  return std::ranges::any_of(sub_op.outputs, bad);
}

ComputeEstimate ComputeModel::estimate(plan::SubOpId id) const {
  const plan::SubOp& sub_op = plan_->sub_op(id);
  const ir::Op& op = plan_->graph->op(sub_op.op);
  const ir::OpDef* def = catalog_->find(op.type);
  assert(def != nullptr);
  ComputeEstimate e;
  e.flops = flops_of(sub_op);
  e.bytes = bytes_of(sub_op);
  const bool tensor_cores = uses_tensor_cores(def->op_class);
  e.peak = cluster::peak_flops(gpu_, tensor_cores ? precision_of(op_dtype(*plan_->graph, sub_op))
                                                  : cluster::Precision::fp32);
  if (e.peak <= 0) e.peak = gpu_.peak_fp32;  // no path for this precision (bf16 on V100)
  e.efficiency = efficiency(def->op_class, e.flops, constants_);
  if (tensor_cores && misaligned(sub_op)) e.efficiency *= constants_.misaligned_efficiency;
  if (profile_ != nullptr) {
    if (std::optional<double> measured = profile_->find(profile_key(id))) {
      e.seconds = *measured;
      e.measured = true;
      return e;
    }
  }
  const double compute = e.flops > 0 && e.peak > 0 ? e.flops / (e.peak * e.efficiency) : 0;
  const double bandwidth = gpu_.memory_bandwidth * constants_.bandwidth_efficiency(def->op_class);
  const double memory = e.bytes > 0 && bandwidth > 0 ? e.bytes / bandwidth : 0;
  e.seconds = std::max(compute, memory);
  if (e.seconds > 0) e.seconds += constants_.launch_seconds;
  return e;
}

}  // namespace loom::cost
