// What a simulated step means to a user (DESIGN.md, "Cost model and simulator"): step time, throughput,
// model FLOPs utilisation, where each device spends the step, and whether it fits in memory.
//
// MFU = model FLOPs per step / (step time x devices x the per-device peak), where model FLOPs are the
// single-device training graph's forward and backward FLOPs (ir::compute_stats): what the model needs,
// not what the plan runs, so recomputation, work replicated across devices and the optimizer step do not
// count (as in Megatron-LM's and PaLM's MFU). The peak is the GpuSpec's dense tensor-core peak for the
// precision of the model's matmuls: the dtype of the tensor-core op (contraction, attention,
// convolution) with the most FLOPs, as cost::ComputeModel prices it; fp32 where the graph has none, and
// the fp32 peak where the GPU has no path for that precision (bf16 on V100).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/cluster/gpu.h"
#include "loom/core/error.h"
#include "loom/cost/memory_model.h"
#include "loom/exec/exec_plan.h"
#include "loom/ir/op_def.h"
#include "loom/sim/simulator.h"

namespace loom::sim {

// What one step processes, as the caller counts it (global batch; tokens = batch x sequence length).
struct Workload {
  double samples_per_step = 0;
  double tokens_per_step = 0;  // 0 for models without tokens
  // How many times a step runs the plan's graph: 1, or dp x micro-batches for a folded plan, whose graph
  // is one micro-batch of one replica (exec/fold.h). Multiplies the model FLOPs.
  double graph_copies = 1;
};

struct DeviceMetrics {
  int device = 0;
  double compute = 0;                // seconds of the step (SimResult::devices)
  double exposed_communication = 0;
  double idle = 0;
  std::int64_t peak_bytes = 0;       // cost::memory_usage
  cost::RoleBytes at_peak;
  bool out_of_memory = false;        // peak_bytes > the GPU's memory
};

struct StepMetrics {
  double step_time = 0;              // seconds
  double samples_per_second = 0;     // 0 when the step takes no time
  double tokens_per_second = 0;
  double model_flops = 0;            // per step: forward + backward of the single-device graph
  cluster::Precision precision = cluster::Precision::fp32;  // of the model's matmuls
  double peak_flops = 0;             // per device, for `precision`
  int devices = 0;
  double mfu = 0;                    // in [0, 1] for any physical plan; 0 when the step takes no time
  std::int64_t memory_capacity = 0;  // bytes per GPU
  std::vector<DeviceMetrics> per_device;  // by device
  int max_memory_device = -1;        // the device with the largest peak (the first on ties)
  int out_of_memory_devices = 0;

  bool out_of_memory() const { return out_of_memory_devices > 0; }
};

// `sim` and `memory` must come from `exec` (memory = cost::memory_usage(exec)); the catalog prices the
// graph's ops. Errors: an ExecPlan without its plan or graph, result sizes that do not match the plan, a
// graph the catalog cannot price, a negative workload.
Expected<StepMetrics> step_metrics(const exec::ExecPlan& exec, const SimResult& sim, const cost::MemoryReport& memory,
                                   const cluster::GpuSpec& gpu, const ir::OpCatalog& catalog, Workload workload);

}  // namespace loom::sim
