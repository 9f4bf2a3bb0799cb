#include "loom/sim/durations.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

namespace loom::sim {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

struct CollectiveKey {
  comm::Primitive kind = comm::Primitive::all_reduce;
  std::int64_t bytes = 0;  // S
  std::vector<int> group;
  std::int64_t step = -1;  // the group step priced (its groups), -1: the group alone
  bool operator==(const CollectiveKey&) const = default;
};
struct CollectiveKeyHash {
  std::size_t operator()(const CollectiveKey& k) const {
    std::uint64_t h = mix(static_cast<std::uint64_t>(k.kind), static_cast<std::uint64_t>(k.bytes));
    h = mix(h, static_cast<std::uint64_t>(k.step));
    for (int d : k.group) h = mix(h, static_cast<std::uint64_t>(d));
    return h;
  }
};

struct VectorHash {
  std::size_t operator()(const std::vector<std::int64_t>& v) const {
    std::uint64_t h = v.size();
    for (std::int64_t x : v) h = mix(h, static_cast<std::uint64_t>(x));
    return h;
  }
};

using P2pKey = std::tuple<int, int, std::int64_t>;
struct P2pKeyHash {
  std::size_t operator()(const P2pKey& k) const {
    return mix(mix(static_cast<std::uint64_t>(std::get<0>(k)), static_cast<std::uint64_t>(std::get<1>(k))),
               static_cast<std::uint64_t>(std::get<2>(k)));
  }
};

// What the hooks share: the models and the caches.
struct Pricing {
  const exec::ExecPlan* exec = nullptr;
  const cost::ComputeModel* compute = nullptr;
  comm::AlphaBetaCostModel comm;
  double launch = 0;
  double hbm = 0;
  std::unordered_map<CollectiveKey, double, CollectiveKeyHash> collectives;
  std::unordered_map<P2pKey, double, P2pKeyHash> transfers;
  std::unordered_map<std::vector<std::int64_t>, double, VectorHash> computes;
  std::vector<std::int64_t> key;  // reused: a cache hit allocates nothing

  // What the ComputeModel reads of a sub-op: its op and the local shapes of its inputs and outputs.
  double compute_time(const plan::SubOp& s) {
    key.clear();
    key.push_back(static_cast<std::int64_t>(s.op.value));
    for (const auto* pieces : {&s.inputs, &s.outputs}) {
      key.push_back(-static_cast<std::int64_t>(pieces->size()) - 1);  // separates the lists
      for (const plan::SubTensor& piece : *pieces) {
        key.push_back(-static_cast<std::int64_t>(piece.box.size()) - 1);
        for (const plan::IndexRange& r : piece.box) key.push_back(r.size());
      }
    }
    if (const auto it = computes.find(key); it != computes.end()) return it->second;
    const double seconds = compute->seconds(s.id);
    computes.emplace(key, seconds);
    return seconds;
  }

  bool in_cluster(int device) const { return comm.cluster().contains(device); }

  double collective(const exec::Collective& c, std::int64_t input_bytes) {
    for (int d : c.group)
      if (!in_cluster(d)) return std::numeric_limits<double>::quiet_NaN();  // the simulator names the instruction
    comm::Step step = collective_step(*exec, c, input_bytes);
    const std::int64_t group_step = priced_step(*exec, c);
    CollectiveKey key{c.kind, step.buffer_bytes, c.group, group_step};
    if (const auto it = collectives.find(key); it != collectives.end()) return it->second;
    if (group_step >= 0) {
      step.groups = exec->group_steps[static_cast<std::size_t>(group_step)];
      for (const std::vector<int>& group : step.groups)
        for (int d : group)
          if (!in_cluster(d)) return std::numeric_limits<double>::quiet_NaN();
    }
    const double seconds = comm.step_time(step);
    collectives.emplace(std::move(key), seconds);
    return seconds;
  }

  double p2p(int src, int dst, std::int64_t bytes) {
    if (!in_cluster(src) || !in_cluster(dst)) return std::numeric_limits<double>::quiet_NaN();
    const P2pKey key{src, dst, bytes};
    if (const auto it = transfers.find(key); it != transfers.end()) return it->second;
    comm::Step step{.rule = "p2p", .primitive = comm::Primitive::p2p, .groups = {}, .buffer_bytes = bytes,
                    .bytes_per_device = bytes, .transfers = {comm::Transfer{src, dst, bytes}}};
    const double seconds = comm.step_time(step);
    transfers.emplace(key, seconds);
    return seconds;
  }

  double local(const exec::Local& l, std::int64_t output_bytes) const {
    // A slice reads only the part it keeps; scale, combine and accumulate read all their inputs.
    double read = static_cast<double>(output_bytes);
    if (l.kind != exec::LocalKind::slice) {
      read = 0;
      for (exec::BufferId in : l.inputs)
        if (in.index() < exec->buffers.size()) read += static_cast<double>(exec->buffer(in).bytes);
    }
    const double moved = read + static_cast<double>(output_bytes);
    if (moved <= 0) return 0;
    // The HBM bandwidth the compute model grants the matching op class: a scale is elementwise, a
    // slice, combine or accumulate is data movement (a strided copy, a concatenation and sum).
    const ir::OpClass op_class = l.kind == exec::LocalKind::scale ? ir::OpClass::elementwise : ir::OpClass::data_movement;
    const double bandwidth = hbm * compute->constants().bandwidth_efficiency(op_class);
    return launch + (bandwidth > 0 ? moved / bandwidth : 0);
  }
};

// Processes sharing a host's cores (cluster::SharedCores): every instruction pays the overhead, and computes
// are scaled, all slowed by the sharing of `processes` processes; communication slowed by its own sharing,
// transfers, all-gathers and reduce-scatters priced by their own α-β when set (after the link's launch L),
// every collective adding its call's overhead.
void share_cores(Durations& d, const exec::ExecPlan& exec, const cluster::SharedCores& shared, double processes,
                 double launch) {
  const double slowdown = shared.slowdown(processes), scale = shared.time_scale, overhead = shared.instruction_overhead;
  const double comm = shared.comm_slowdown(processes), extra = slowdown * overhead;
  d.compute = [f = std::move(d.compute), slowdown, scale, overhead](const plan::SubOp& s, int device) {
    return slowdown * (scale * f(s, device) + overhead);
  };
  d.local = [f = std::move(d.local), slowdown, scale, overhead](const exec::Local& l, std::int64_t bytes) {
    return slowdown * (scale * f(l, bytes) + overhead);
  };
  d.collective = [f = std::move(d.collective), &exec, shared, comm, extra, launch](const exec::Collective& c,
                                                                                   std::int64_t bytes) {
    const bool gather = c.kind == comm::Primitive::all_gather && shared.all_gather_bandwidth > 0;
    const bool scatter = c.kind == comm::Primitive::reduce_scatter && shared.reduce_scatter_bandwidth > 0;
    const double call = shared.collective_overhead;
    if ((!gather && !scatter) || c.group.size() < 2) return comm * (f(c, bytes) + call) + extra;
    const double link = f(c, bytes);  // NaN for a group outside the cluster: the simulator names it
    if (std::isnan(link)) return link;
    // One ring pass: n − 1 hops, each member sending (n − 1)/n of the whole.
    const comm::Step step = collective_step(exec, c, bytes);
    const double hops = static_cast<double>(c.group.size() - 1);
    const double alpha = gather ? shared.all_gather_latency : shared.reduce_scatter_latency;
    const double beta = gather ? shared.all_gather_bandwidth : shared.reduce_scatter_bandwidth;
    return comm * (launch + hops * alpha + static_cast<double>(step.bytes_per_device) / beta + call) + extra;
  };
  if (shared.p2p_bandwidth > 0) {
    d.p2p = [f = std::move(d.p2p), alpha = shared.p2p_latency, beta = shared.p2p_bandwidth, comm, extra,
             launch](int src, int dst, std::int64_t bytes) {
      const double link = f(src, dst, bytes);  // NaN for a device outside the cluster: the simulator names it
      return std::isnan(link) ? link : comm * (launch + alpha + static_cast<double>(bytes) / beta) + extra;
    };
    return;
  }
  d.p2p = [f = std::move(d.p2p), comm, extra](int src, int dst, std::int64_t bytes) {
    return comm * f(src, dst, bytes) + extra;
  };
}

}  // namespace

std::int64_t priced_step(const exec::ExecPlan& exec, const exec::Collective& c) {
  const auto tag = static_cast<std::size_t>(c.tag);
  if (c.tag < 0 || tag >= exec.collectives.size()) return -1;
  const std::int64_t step = exec.collectives[tag].step;
  if (step < 0 || static_cast<std::size_t>(step) >= exec.group_steps.size()) return -1;
  std::vector<int> group = c.group;
  std::ranges::sort(group);
  const auto& groups = exec.group_steps[static_cast<std::size_t>(step)];
  return std::ranges::find(groups, group) != groups.end() ? step : -1;
}

comm::Step collective_step(const exec::ExecPlan& exec, const exec::Collective& c, std::int64_t input_bytes) {
  const auto n = static_cast<std::int64_t>(c.group.size());
  std::int64_t s = input_bytes;
  if (c.kind == comm::Primitive::all_gather)
    s = c.output.index() < exec.buffers.size() ? exec.buffer(c.output).bytes : input_bytes * n;
  const std::int64_t sent = n > 0 ? (c.kind == comm::Primitive::all_reduce ? 2 : 1) * (n - 1) * s / n : 0;
  return comm::Step{.rule = std::string(comm::name(c.kind)), .primitive = c.kind, .groups = {c.group},
                    .buffer_bytes = s, .bytes_per_device = sent, .transfers = {}};
}

Expected<Durations> model_durations(const exec::ExecPlan& exec, const cost::ComputeModel& compute,
                                    const cluster::Cluster& cluster, DurationOptions options) {
  if (exec.plan == nullptr)
    return fail("the ExecPlan has no plan to price its computes from", "simulate an ExecPlan from materialize");
  if (exec.num_devices > cluster.device_count())
    return fail(fmt::format("the plan runs on {} devices but cluster {} has {}", exec.num_devices, cluster.name,
                            cluster.device_count()),
                fmt::format("choose a cluster with at least {} GPUs (e.g. more nodes: <preset>x<nodes>)", exec.num_devices));
  if (compute.gpu() != cluster.gpu)
    return fail(fmt::format("the compute model prices a {} but cluster {} has {}", compute.gpu().name, cluster.name,
                            cluster.gpu.name),
                "make the ComputeModel with the cluster's GpuSpec");
  if (!(options.contention >= 1) || !std::isfinite(options.contention))
    return fail(fmt::format("a contention of {}", options.contention),
                "contention is the slowdown of communication under compute: 1 (none) or more");
  auto pricing = std::make_shared<Pricing>(Pricing{.exec = &exec,
                                                   .compute = &compute,
                                                   .comm = comm::AlphaBetaCostModel(cluster, options.comm),
                                                   .launch = compute.constants().launch_seconds,
                                                   .hbm = compute.gpu().memory_bandwidth,
                                                   .collectives = {},
                                                   .transfers = {},
                                                   .computes = {},
                                                   .key = {}});
  Durations durations;
  durations.compute = [pricing](const plan::SubOp& s, int) { return pricing->compute_time(s); };
  durations.collective = [pricing](const exec::Collective& c, std::int64_t bytes) { return pricing->collective(c, bytes); };
  durations.p2p = [pricing](int src, int dst, std::int64_t bytes) { return pricing->p2p(src, dst, bytes); };
  durations.local = [pricing](const exec::Local& l, std::int64_t bytes) { return pricing->local(l, bytes); };
  // Offloaded steps (ZeRO-Offload): the step's elements at this GPU's share of its node's CPU Adam
  // throughput, and each copy at its share of its PCIe switch's uplink plus a copy's launch.
  const double adam = cluster.cpu_adam_share(), pcie = cluster.pcie_share(), launch = compute.constants().launch_seconds;
  durations.host_compute = [adam](const plan::SubOp& s, int) {
    return s.outputs.empty() ? 0.0 : static_cast<double>(s.outputs.front().local_shape().numel()) / adam;
  };
  durations.copy = [pcie, launch](std::int64_t bytes, int) { return launch + static_cast<double>(bytes) / pcie; };
  durations.contention = options.contention;
  if (cluster.shared != cluster::SharedCores{})
    share_cores(durations, exec, cluster.shared, options.busy_processes > 0 ? options.busy_processes : exec.num_devices,
                options.comm.launch_latency);
  return durations;
}

}  // namespace loom::sim
