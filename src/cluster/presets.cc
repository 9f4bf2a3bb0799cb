// Numbers from REFERENCE.md "Cluster presets" unless marked. Conventions:
// - Intra-node figures quoted by NVIDIA (NVSwitch 300 / 600 / 900 GB/s per GPU, 3090 bridge 112.5 GB/s)
//   are both directions together; a tier stores one direction, so they are halved.
// - NIC rates (100 / 200 / 400 Gb/s) are per direction; inter-node bandwidth per GPU = node NIC total /
//   GPUs per node (all GPUs sending at once, the case collectives see).
// - Latencies are not in REFERENCE.md. They are per-hop α (one ring step or one send), in the spirit of
//   NCCL's tuning model (hardware latency per step ≈ 0.6 µs NVLink, 1 µs PCIe, a few µs network), rounded
//   up (assumption): NVLink/NVSwitch 1 µs, PCIe 2 µs, InfiniBand 5 µs, RoCE 6 µs. The fixed cost of
//   launching a collective is the cost model's, not the link's (comm/cost_model.h).
#include "loom/cluster/presets.h"

#include <charconv>
#include <functional>
#include <utility>

#include "loom/cluster/cluster_file.h"
#include "loom/core/strings.h"

namespace loom::cluster {
namespace {

constexpr double kGB = 1e9;
constexpr double kTFLOPs = 1e12;
constexpr double kGbit = 1e9 / 8;  // bytes/s in one Gb/s
constexpr std::int64_t kGiB = std::int64_t{1} << 30;

constexpr double kNvlinkLatency = 1e-6;
constexpr double kPcieLatency = 2e-6;
constexpr double kInfinibandLatency = 5e-6;
constexpr double kRoceLatency = 6e-6;

// V100: 125 TFLOP/s fp16 tensor, 15.7 fp32, 32 GB, 900 GB/s; no bf16 path.
GpuSpec v100() { return {"V100-32GB", 0, 125 * kTFLOPs, 15.7 * kTFLOPs, 32 * kGiB, 900 * kGB}; }
// A100: 312 TFLOP/s bf16/fp16 dense; fp32 19.5 TFLOP/s (NVIDIA datasheet, not in REFERENCE.md).
GpuSpec a100() { return {"A100-SXM-80GB", 312 * kTFLOPs, 312 * kTFLOPs, 19.5 * kTFLOPs, 80 * kGiB, 2000 * kGB}; }
// H100: 989 TFLOP/s bf16/fp16 dense; fp32 67 TFLOP/s (NVIDIA datasheet, not in REFERENCE.md).
GpuSpec h100() { return {"H100-SXM-80GB", 989 * kTFLOPs, 989 * kTFLOPs, 67 * kTFLOPs, 80 * kGiB, 3350 * kGB}; }
// H200: the H100 SXM's tensor cores and clocks (989 TFLOP/s bf16/fp16 dense, 67 fp32) with 141 GB of HBM3e at
// 4.8 TB/s (NVIDIA datasheet). Capacity as torch reads it on a lent H200: 143,771 MiB, 140 GiB.
GpuSpec h200() { return {"H200-SXM-141GB", 989 * kTFLOPs, 989 * kTFLOPs, 67 * kTFLOPs, 140 * kGiB, 4800 * kGB}; }
// RTX 3090: 24 GB, 936 GB/s. Training's fp16 and bf16 GEMMs accumulate in fp32 (cuBLAS
// CUBLAS_COMPUTE_32F, PyTorch's default), which GeForce Ampere runs at half its fp16-accumulate rate:
// 82 SMs × 4 tensor cores × 128 fp16 FMA/clock × 2 × 1.695 GHz = 142 TFLOP/s with fp16 accumulate,
// 71 with fp32 accumulate, bf16 the same (NVIDIA GA102 whitepaper, Appendix A: "Peak FP16 Tensor TFLOPS
// with FP32 Accumulate 71/142", dense/sparse). So the training peak is 71, not 35.6: 35.6 TFLOP/s is
// the fp32 path without tensor cores (and TF32 on tensor cores), which fp32 training uses.
GpuSpec rtx3090() { return {"RTX3090", 71 * kTFLOPs, 71 * kTFLOPs, 35.6 * kTFLOPs, 24 * kGiB, 936 * kGB}; }

// V100 NVLink2: 6 links × 25 GB/s per direction (used for the hybrid cube-mesh, an assumption).
constexpr double kV100Nvlink = 150 * kGB;
// PCIe 4.0 x16: 31.5 GB/s per direction.
constexpr double kPcie4 = 31.5 * kGB;
// Between GeForce cards over PCIe there is no peer-to-peer (cudaDeviceCanAccessPeer is false), so NCCL
// (2.10: src/transport/shm.cc) connects such a pair by its SHM transport: the sending GPU's kernel writes
// each chunk into a pinned host buffer, the receiving GPU's kernel reads it from there. Every hop's bytes
// cross PCIe twice (device -> host on the sender's link, host -> device on the receiver's), both through
// the CPU's root complex and memory, which bound collectives on PCIe systems (an NCCL maintainer, NVIDIA/nccl
// issue 1639). The tier prices a hop as its two crossings in turn (an assumption: NCCL pipelines chunks
// through the buffer, so the crossings overlap where root complex and memory keep up): half the link's
// rate, and a latency of two PCIe crossings.
constexpr LinkTier kPcie4HostStaged{LinkKind::pcie, kPcie4 / 2, 2 * kPcieLatency};

// Hosts (HostSpec, for offloaded optimizers). Effective PCIe x16 rates per direction with pinned memory:
// 3.0 ~12 GB/s (ZeRO-Offload's V100 systems), 4.0 ~24 GB/s, 5.0 ~48 GB/s (twice per generation, an
// assumption beside 3.0's figure). CPU Adam: ZeRO-Offload Table 3 measured 1e9 parameters in 0.22 s on the
// DGX-2's two 24-core Xeon Platinum 8168 (AVX512): 4.5e9 parameters/s per node. Other hosts scale it by
// cores x SIMD lanes (an assumption: Adam is bandwidth- and vector-bound alike): DGX-1's two 20-core E5-2698
// v4 (AVX2, half the lanes) 40/48 x 1/2; DGX A100's two 64-core EPYC 7742 (AVX2) 128/48 x 1/2; DGX H100's
// two 56-core Xeon 8480C (AVX512) 112/48. Host memory: NVIDIA's datasheets (DGX-1 512 GB, DGX-2 1.5 TB,
// DGX A100 1 TB, DGX H100 2 TB), as binary units.
constexpr double kDgx2Adam = 1e9 / 0.22;
HostSpec dgx2_host() { return {12 * kGB, 2, kDgx2Adam, 1536 * kGiB}; }
HostSpec dgx1_host() { return {12 * kGB, 2, kDgx2Adam * 40 / 48 / 2, 512 * kGiB}; }
HostSpec dgx_a100_host() { return {24 * kGB, 2, kDgx2Adam * 128 / 48 / 2, 1024 * kGiB}; }
HostSpec dgx_h100_host() { return {48 * kGB, 2, kDgx2Adam * 112 / 48, 2048 * kGiB}; }
// The Oases 3090 servers' hosts are not described: each GPU on its own PCIe 4.0 x16 (an assumption), and
// DGX A100's CPU and memory figures.
HostSpec rtx3090_host() { return {24 * kGB, 1, kDgx2Adam * 128 / 48 / 2, 1024 * kGiB}; }

// This development machine (2 cores, one socket) as a cluster of 4 single-thread processes over gloo, as
// `python -m loom.runtime.launch` runs a plan's ranks on it; `loom calibrate` fits the rest on real runs
// (docs/calibration.md). Measured with `python -m loom_profile.cluster --world 4` (2026-11-27, load 4.5 from
// other builds): 4 processes at once got 20.6 GFLOP/s each on a 512^3 fp32 product and 8.9 GB/s on a 32 MiB
// copy, so one process alone on a core twice that; gloo all-reduce over 4 fitted α 1.3 ms, β 1.07 GB/s (rms
// error 11 %). No bf16 / fp16 path: the peaks are fp32's. Memory: the machine's 24 GiB over 4 processes.
Cluster cpu_host() {
  constexpr double kPeak = 2 * 20.57e9, kBandwidth = 2 * 8.92 * kGB;
  const LinkTier gloo{LinkKind::pcie, 1.073 * kGB, 1.305e-3};
  Cluster c;
  c.name = "cpu-host";
  c.gpus_per_node = 4;
  c.gpu = GpuSpec{"cpu-host", 0, 0, kPeak, 6 * kGiB, kBandwidth};
  c.intra = c.inter = gloo;
  c.nic_bandwidth = gloo.bandwidth;
  c.host.memory_bytes = 24 * kGiB;
  c.shared = SharedCores{.cores = 2, .core_sharing = 1, .time_scale = 1, .instruction_overhead = 0};
  return c;
}

Cluster node_preset(std::string name, int gpus, GpuSpec gpu, LinkTier intra, LinkKind nic_kind, int nics,
                    double nic_gbit, HostSpec host) {
  Cluster c;
  c.host = host;
  c.name = std::move(name);
  c.gpus_per_node = gpus;
  c.gpu = std::move(gpu);
  c.intra = intra;
  c.nics_per_node = nics;
  c.nic_bandwidth = nic_gbit * kGbit;
  const double latency = nic_kind == LinkKind::roce ? kRoceLatency : kInfinibandLatency;
  c.inter = LinkTier{nic_kind, c.node_nic_bandwidth() / gpus, latency};
  return c;
}

struct Preset {
  const char* name;
  std::function<Cluster()> make;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      {"dgx2",  // 16 × V100, NVSwitch 300 GB/s per GPU (both directions), 8 × 100 Gb/s IB per node
       [] { return node_preset("dgx2", 16, v100(), {LinkKind::nvswitch, 150 * kGB, kNvlinkLatency}, LinkKind::infiniband, 8, 100, dgx2_host()); }},
      {"dgx1",  // 8 × V100, NVLink hybrid cube-mesh, 1 × 100 Gb/s IB per node
       [] { return node_preset("dgx1", 8, v100(), {LinkKind::nvlink, kV100Nvlink, kNvlinkLatency}, LinkKind::infiniband, 1, 100, dgx1_host()); }},
      {"v100x8",  // SuperScaler: 8 × V100 NVLink, 100 Gb/s IB per node
       [] { return node_preset("v100x8", 8, v100(), {LinkKind::nvlink, kV100Nvlink, kNvlinkLatency}, LinkKind::infiniband, 1, 100, dgx1_host()); }},
      {"m8",  // Rhino: 8 × V100-SXM2-32GB NVLink2, 1 × 100 Gb/s RoCE
       [] { return node_preset("m8", 8, v100(), {LinkKind::nvlink, kV100Nvlink, kNvlinkLatency}, LinkKind::roce, 1, 100, dgx1_host()); }},
      {"dgx-a100",  // 8 × A100, NVSwitch 600 GB/s per GPU (both directions), 8 × 200 Gb/s HDR IB
       [] { return node_preset("dgx-a100", 8, a100(), {LinkKind::nvswitch, 300 * kGB, kNvlinkLatency}, LinkKind::infiniband, 8, 200, dgx_a100_host()); }},
      {"dgx-h100",  // 8 × H100, NVSwitch 900 GB/s per GPU (both directions), 8 × 400 Gb/s NDR IB
       [] { return node_preset("dgx-h100", 8, h100(), {LinkKind::nvswitch, 450 * kGB, kNvlinkLatency}, LinkKind::infiniband, 8, 400, dgx_h100_host()); }},
      {"dgx-h200",  // 8 × H200, NVSwitch 900 GB/s per GPU (both directions), 8 × 400 Gb/s NDR IB; DGX H100's host
       [] { return node_preset("dgx-h200", 8, h200(), {LinkKind::nvswitch, 450 * kGB, kNvlinkLatency}, LinkKind::infiniband, 8, 400, dgx_h100_host()); }},
      {"rtx3090-nvlink",  // Oases: 4 × RTX 3090, NVLink bridge 0–1 and 2–3 (112.5 GB/s both directions), else PCIe 4.0 via host
       [] {
         Cluster c = node_preset("rtx3090-nvlink", 4, rtx3090(), kPcie4HostStaged, LinkKind::infiniband, 1, 100, rtx3090_host());
         c.bridge = PairBridge{{LinkKind::nvlink, 56.25 * kGB, kNvlinkLatency}};
         return c;
       }},
      {"rtx3090",  // Oases: 4 × RTX 3090, PCIe 4.0 only (via host memory), 100 Gb/s IB
       [] { return node_preset("rtx3090", 4, rtx3090(), kPcie4HostStaged, LinkKind::infiniband, 1, 100, rtx3090_host()); }},
      {"cpu-host", cpu_host},  // this machine's CPU as 4 gloo processes on 2 cores (calibrated: docs/calibration.md)
  };
  return table;
}

const Preset* find_preset(std::string_view name) {
  for (const Preset& p : presets())
    if (name == p.name) return &p;
  return nullptr;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.emplace_back(p.name);
  return names;
}

Expected<Cluster> make_cluster(std::string_view name) {
  const auto unknown = [&] {
    return fail(fmt::format("unknown cluster '{}'", name),
                fmt::format("use a preset, optionally with a node count as \"<preset>x<nodes>\" (e.g. v100x8x2), "
                            "or a cluster file (.yaml, .yml or .json): {}",
                            join(preset_names(), ", ")));
  };
  if (is_cluster_file_path(name)) return load_cluster_file(std::string(name));
  int nodes = 1;
  const Preset* preset = find_preset(name);
  if (preset == nullptr) {
    const std::size_t cut = name.rfind('x');
    if (cut == std::string_view::npos || cut == 0) return unknown();
    preset = find_preset(name.substr(0, cut));
    if (preset == nullptr) return unknown();
    const std::string_view count = name.substr(cut + 1);
    const auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), nodes);
    if (ec != std::errc{} || end != count.data() + count.size() || nodes < 1 || nodes > 65536)
      return fail(fmt::format("bad node count '{}' in cluster '{}'", count, name),
                  "write a positive number of nodes after the preset, e.g. v100x8x2");
  }
  Cluster cluster = preset->make();
  cluster.name = std::string(name);
  cluster.nodes = nodes;
  return cluster;
}

}  // namespace loom::cluster
