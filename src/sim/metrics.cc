#include "loom/sim/metrics.h"

#include <fmt/format.h>

#include "loom/cost/compute_model.h"
#include "loom/ir/graph_stats.h"

namespace loom::sim {
namespace {

// The precision of the model's matmuls: the dtype of the tensor-core op with the most FLOPs (its first
// floating input's, as the compute model reads it).
cluster::Precision matmul_precision(const ir::Graph& graph, const ir::OpCatalog& catalog, const std::vector<double>& flops) {
  double best = -1;
  ir::DType dtype = ir::DType::f32;
  for (const ir::Op& op : graph.ops) {
    const ir::OpDef* def = catalog.find(op.type);
    if (def == nullptr || !cost::uses_tensor_cores(def->op_class) || flops[op.id.index()] <= best) continue;
    for (ir::TensorId in : op.inputs)
      if (ir::is_floating(graph.tensor(in).dtype)) {
        best = flops[op.id.index()];
        dtype = graph.tensor(in).dtype;
        break;
      }
  }
  return cost::precision_of(dtype);
}

}  // namespace

Expected<StepMetrics> step_metrics(const exec::ExecPlan& exec, const SimResult& sim, const cost::MemoryReport& memory,
                                   const cluster::GpuSpec& gpu, const ir::OpCatalog& catalog, Workload workload) {
  if (exec.plan == nullptr || exec.plan->graph == nullptr)
    return fail("the ExecPlan has no plan or graph to count model FLOPs from", "use an ExecPlan from materialize");
  const auto devices = static_cast<std::size_t>(exec.num_devices);
  if (sim.devices.size() != devices || memory.devices.size() != devices)
    return fail(fmt::format("the simulation covers {} devices and the memory report {}, but the plan has {}",
                            sim.devices.size(), memory.devices.size(), devices),
                "compute both from the same ExecPlan");
  if (!(workload.graph_copies >= 1))
    return fail(fmt::format("a workload of {} graph copies per step", workload.graph_copies),
                "a step runs its graph at least once");
  if (!(workload.samples_per_step >= 0) || !(workload.tokens_per_step >= 0))
    return fail(fmt::format("a workload of {} samples and {} tokens per step", workload.samples_per_step,
                            workload.tokens_per_step),
                "samples and tokens per step are counts: 0 or more");
  const ir::Graph& graph = *exec.plan->graph;
  LOOM_ASSIGN_OR_RETURN(const std::vector<double> flops, ir::op_flops(graph, catalog));
  StepMetrics m;
  m.step_time = sim.step_time;
  m.devices = exec.num_devices;
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward || op.pass == ir::Pass::backward) m.model_flops += flops[op.id.index()];
  m.model_flops *= workload.graph_copies;
  m.precision = matmul_precision(graph, catalog, flops);
  m.peak_flops = cluster::peak_flops(gpu, m.precision);
  if (m.peak_flops <= 0) m.peak_flops = gpu.peak_fp32;  // no path for this precision: as the compute model
  if (m.step_time > 0) {
    m.samples_per_second = workload.samples_per_step / m.step_time;
    m.tokens_per_second = workload.tokens_per_step / m.step_time;
    const double capacity = m.step_time * static_cast<double>(m.devices) * m.peak_flops;
    m.mfu = capacity > 0 ? m.model_flops / capacity : 0;
  }
  m.memory_capacity = gpu.memory_bytes;
  m.max_memory_device = memory.max_device();
  for (std::size_t d = 0; d < devices; ++d) {
    const DeviceTime& t = sim.devices[d];
    const cost::DeviceMemory& mem = memory.devices[d];
    DeviceMetrics dm{.device = static_cast<int>(d), .compute = t.compute,
                     .exposed_communication = t.exposed_communication, .idle = t.idle,
                     .peak_bytes = mem.peak_bytes, .at_peak = mem.at_peak,
                     .out_of_memory = mem.peak_bytes > gpu.memory_bytes};
    m.out_of_memory_devices += dm.out_of_memory;
    m.per_device.push_back(dm);
  }
  return m;
}

}  // namespace loom::sim
