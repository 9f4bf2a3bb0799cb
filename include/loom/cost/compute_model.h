// Compute model (DESIGN.md, "Cost model and simulator"): the time of one sub-op on one GPU, by the
// roofline  max(flops / (peak · eff), bytes / hbm_bw), unless the profile database holds a measured time.
//
//  flops  the op's FLOPs (its OpDef's formula, as ir::op_flops) evaluated on the sub-op's local shapes;
//         a backward sub-op costs flops_factor x its forward part's. Where an op cannot be resolved on
//         local shapes (a reshape whose attributes name the whole shape), the whole op's FLOPs scaled by
//         the smallest local/whole element ratio of its inputs and outputs.
//  bytes  local bytes read plus written (shape-only inputs excluded); a forward op with its own byte
//         formula (embedding gathers) uses it on the local shapes.
//         bytes over the GPU's HBM bandwidth times the class's measured bandwidth efficiency.
//  peak   tensor-core classes (contraction, attention, convolution): the GPU's peak for the op's dtype
//         (bf16 / fp16; fp32 and fp64 take the fp32 peak; a GPU without a bf16 path, V100, runs bf16 at
//         its fp32 peak). Every other class runs on the vector units: the fp32 peak.
//  eff    see ComputeConstants.
#pragma once

#include <vector>

#include "loom/cluster/gpu.h"
#include "loom/cost/profile_db.h"
#include "loom/ir/op_def.h"
#include "loom/plan/plan.h"

namespace loom::cost {

// Every constant of the compute model, in one place.
//
// Tensor-core classes reach at most `tensor_core_efficiency` of the datasheet peak: large GEMMs in
// cuBLAS and FlashAttention kernels sustain 70-80 % of peak on A100 / H100 (NVIDIA's "Matrix
// Multiplication Background" guide; Dao 2023), and Megatron-LM's end-to-end 52 % MFU on GPT-3 175B leaves
// room for communication and the memory-bound ops. Small shards fill fewer SMs and waves: efficiency
// falls as a saturating curve of the FLOPs of the instance,
//     eff(f) = tensor_core_efficiency · f / (f + half_efficiency_flops),
// which gives ~0.69 for a 4096³ GEMM (1.4e11 FLOPs), ~0.57 for 1024³ (2.1e9) and ~0.25 for 512³
// (2.7e8): a rough fit to published cuBLAS throughput curves, not a measurement of this machine. The
// profile database replaces it where measurements exist.
//
// Memory-bound classes (elementwise, reduction incl. softmax, normalization, data movement, embedding,
// loss, optimizer) do little arithmetic per byte; their FLOPs run on the vector units at
// `vector_efficiency` of the fp32 peak, so in practice bytes / hbm_bw decides their time.
struct ComputeConstants {
  double tensor_core_efficiency = 0.7;
  double half_efficiency_flops = 5e8;
  double vector_efficiency = 0.5;
  // Memory-bound classes reach only part of the HBM bandwidth, by class: the median fraction measured on
  // H100 with data/profiles/H100-SXM-80GB.json (docs/profiling.md): elementwise 0.81, embedding 0.68,
  // optimizer (AdamW) 0.56, normalization 0.49, data movement (transposes, copies) 0.44, loss (cross
  // entropy) 0.33; reductions (softmax, sums) taken as normalization. Tensor-core classes: 1.
  double bandwidth_efficiency(ir::OpClass op_class) const;
  // A 16-bit GEMM whose inner or output dimension is not a multiple of 8 loses cuBLAS's aligned
  // tensor-core kernels: the median measured H100 time of such GEMMs was 3x the roofline (GPT-3 13B's
  // d_model 5140, the unpadded vocabulary 50257). Multiplies the tensor-core efficiency.
  double misaligned_efficiency = 1.0 / 3.0;
  // Fixed per-kernel cost (launch and tail), added to every sub-op that does any work. Zero by default:
  // the roofline alone, as DESIGN.md states it; the simulator may set ~5 µs.
  double launch_seconds = 0;
};

// What the model computed for one sub-op, for reports and tests.
struct ComputeEstimate {
  double flops = 0;
  double bytes = 0;
  double peak = 0;        // FLOP/s used
  double efficiency = 0;  // of `peak`
  double seconds = 0;
  bool measured = false;  // taken from the profile database
};

// True for the classes that run on tensor cores (contraction, attention, convolution).
bool uses_tensor_cores(ir::OpClass op_class);
// The efficiency for an instance of `flops` FLOPs of `op_class` under `constants`.
double efficiency(ir::OpClass op_class, double flops, const ComputeConstants& constants = {});
// The precision whose peak an op of `dtype` uses on the tensor-core path.
cluster::Precision precision_of(ir::DType dtype);

class ComputeModel {
 public:
  // `plan`, `catalog` and `profile` (optional) must outlive the model. Errors: an op of unknown type, a
  // graph op_flops cannot evaluate.
  static Expected<ComputeModel> make(const plan::Plan& plan, const ir::OpCatalog& catalog, cluster::GpuSpec gpu,
                                     const ProfileDb* profile = nullptr, ComputeConstants constants = {});

  ComputeEstimate estimate(plan::SubOpId sub_op) const;
  double seconds(plan::SubOpId sub_op) const { return estimate(sub_op).seconds; }
  // The profile key of a sub-op on this model's GPU.
  ProfileKey profile_key(plan::SubOpId sub_op) const;

  const cluster::GpuSpec& gpu() const { return gpu_; }
  const ComputeConstants& constants() const { return constants_; }

 private:
  ComputeModel() = default;
  double flops_of(const plan::SubOp& sub_op) const;
  double bytes_of(const plan::SubOp& sub_op) const;
  double whole_fraction(const plan::SubOp& sub_op) const;
  bool misaligned(const plan::SubOp& sub_op) const;

  const plan::Plan* plan_ = nullptr;
  const ir::OpCatalog* catalog_ = nullptr;
  const ProfileDb* profile_ = nullptr;
  cluster::GpuSpec gpu_;
  ComputeConstants constants_;
  std::vector<double> op_flops_;  // whole-op FLOPs by OpId (ir::op_flops)
};

}  // namespace loom::cost
