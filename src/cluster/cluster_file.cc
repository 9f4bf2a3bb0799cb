// Cluster files (docs/clusters.md). Reading never throws: yaml-cpp's exceptions end at this file, and
// numbers are parsed from the scalar text here (std::from_chars) rather than with YAML::Node::as.
#include "loom/cluster/cluster_file.h"

#include <charconv>
#include <cmath>
#include <exception>
#include <limits>
#include <set>
#include <span>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "loom/core/input_file.h"
#include "loom/core/strings.h"
#include "loom/core/yaml_document.h"

namespace loom::cluster {
namespace {

constexpr std::string_view kTopFields[] = {"name", "nodes", "gpus_per_node", "gpu", "intra", "inter",
                                           "bridge", "nics_per_node", "nic_bandwidth", "comm_contention", "host",
                                           "shared_cores"};
constexpr std::string_view kHostFields[] = {"pcie_bandwidth", "gpus_per_pcie_switch", "cpu_adam_params_per_second",
                                            "memory_bytes"};
constexpr std::string_view kSharedFields[] = {"cores", "core_sharing", "time_scale", "instruction_overhead",
                                              "comm_sharing", "p2p_latency", "p2p_bandwidth", "all_gather_latency",
                                              "all_gather_bandwidth", "reduce_scatter_latency",
                                              "reduce_scatter_bandwidth", "collective_overhead"};
constexpr std::string_view kGpuFields[] = {"name", "peak_bf16", "peak_fp16", "peak_fp32", "memory_bytes",
                                           "memory_bandwidth"};
constexpr std::string_view kLinkFields[] = {"kind", "bandwidth", "latency"};
constexpr std::string_view kLinkKinds = "nvlink, nvswitch, pcie, infiniband (ib), roce";
constexpr std::string_view kSchemaHint =
    "see docs/clusters.md; `loom clusters --yaml dgx-a100` prints a complete file to start from";

constexpr int kMaxNodes = 65536;  // as make_cluster's "<preset>x<nodes>"
constexpr int kMaxGpusPerNode = 1024;
constexpr int kMaxNics = 1024;
constexpr std::uintmax_t kMaxFileBytes = std::uintmax_t{16} << 20;

std::string known(std::span<const std::string_view> fields) {
  std::vector<std::string> names(fields.begin(), fields.end());
  return join(names, ", ");
}

// The values a cluster field may take: per second rates from 1 (byte, FLOP, parameter) to 1e18, a latency up
// to a second (links take microseconds), a contention up to 100.
struct Range {
  double min = 1, max = 1e18;
  bool zero_ok = false;
};
constexpr Range kRate{};
constexpr Range kPeak{.zero_ok = true};
constexpr Range kLatency{.min = 0, .max = 1, .zero_ok = true};
constexpr Range kContention{.min = 0, .max = 100};
constexpr Range kSharing{.min = 0, .max = 100, .zero_ok = true};
constexpr Range kScale{.min = 1e-3, .max = 1e3};

// Reads fields of one file, turning every problem into an Error that names the file and the field.
class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  std::unexpected<Error> error(std::string_view field, std::string_view what, std::string hint) const {
    return fail(fmt::format("cluster file '{}': field '{}' {}", source_, field, what), std::move(hint));
  }

  // Every key of `map` must be one of `fields`, once: a misspelt key is an error, not silently ignored, and so
  // is a repeated one (yaml-cpp keeps both and its lookups see the first).
  Expected<void> check_keys(const YAML::Node& map, std::string_view prefix,
                            std::span<const std::string_view> fields) const {
    std::set<std::string> seen;
    for (const auto& item : map) {
      const std::string key = item.first.IsScalar() ? item.first.Scalar() : std::string("<non-scalar key>");
      if (!seen.insert(key).second)
        return fail(fmt::format("cluster file '{}': field '{}{}' is given twice (again at line {})", source_, prefix, key,
                                item.first.Mark().line + 1),
                    "keep one of them");
      bool found = false;
      for (std::string_view f : fields) found = found || key == f;
      if (!found)
        return fail(fmt::format("cluster file '{}': unknown field '{}{}'", source_, prefix, key),
                    fmt::format("the fields {}are: {}; {}", prefix.empty() ? "" : fmt::format("of '{}' ", prefix.substr(0, prefix.size() - 1)),
                                known(fields), kSchemaHint));
    }
    return {};
  }

  Expected<YAML::Node> child(const YAML::Node& map, std::string_view prefix, std::string_view key) const {
    const std::string field = fmt::format("{}{}", prefix, key);
    const YAML::Node node = map[std::string(key)];
    if (!node.IsDefined()) return error(field, "is missing", fmt::format("add '{}'; {}", key, kSchemaHint));
    if (node.IsNull()) return error(field, "has no value", fmt::format("give '{}' a value; {}", key, kSchemaHint));
    return node;
  }

  Expected<YAML::Node> mapping(const YAML::Node& map, std::string_view prefix, std::string_view key,
                               std::span<const std::string_view> fields) const {
    LOOM_ASSIGN_OR_RETURN(YAML::Node node, child(map, prefix, key));
    const std::string field = fmt::format("{}{}", prefix, key);
    if (!node.IsMap())
      return error(field, "is not a mapping", fmt::format("write '{}' with the fields {}", key, known(fields)));
    LOOM_RETURN_IF_ERROR(check_keys(node, field + ".", fields));
    return node;
  }

  Expected<std::string> text(const YAML::Node& map, std::string_view prefix, std::string_view key) const {
    LOOM_ASSIGN_OR_RETURN(YAML::Node node, child(map, prefix, key));
    const std::string field = fmt::format("{}{}", prefix, key);
    if (!node.IsScalar()) return error(field, "is not a string", "write it as a plain or quoted string");
    if (trim(node.Scalar()).empty()) return error(field, "is empty", "give it a name");
    return node.Scalar();
  }

  // A finite number within `range` (zero allowed only where range.zero_ok).
  Expected<double> number(const YAML::Node& map, std::string_view prefix, std::string_view key, Range range,
                          std::string_view unit) const {
    const bool positive = !range.zero_ok;
    LOOM_ASSIGN_OR_RETURN(YAML::Node node, child(map, prefix, key));
    const std::string field = fmt::format("{}{}", prefix, key);
    const std::string hint = fmt::format("give a number in {}, e.g. 1.5e11", unit);
    if (!node.IsScalar()) return error(field, "is not a number", hint);
    std::string_view t = trim(node.Scalar());
    if (!t.empty() && t.front() == '+') t.remove_prefix(1);
    double value = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    if (t.empty() || ec != std::errc{} || end != t.data() + t.size() || !std::isfinite(value))
      return error(field, fmt::format("is not a number: '{}'", node.Scalar()), hint);
    if (value < 0) return error(field, fmt::format("is negative: {}", node.Scalar()), hint);
    if (positive && value == 0) return error(field, "is zero", fmt::format("give a positive number in {}", unit));
    // Past these a prediction is nonsense or overflows (a latency of 1e308 s made the step time inf).
    if (value != 0 && (value < range.min || value > range.max))
      return error(field, fmt::format("is out of range: {}", node.Scalar()),
                   fmt::format("give a number in {} from {:g} to {:g}{}", unit, range.min, range.max,
                               range.zero_ok && range.min > 0 ? " (or 0)" : ""));
    return value;
  }

  // An integer in [min, max]; written as an integer or as an integral number such as 80e9.
  Expected<std::int64_t> integer(const YAML::Node& map, std::string_view prefix, std::string_view key,
                                 std::int64_t min, std::int64_t max) const {
    LOOM_ASSIGN_OR_RETURN(YAML::Node node, child(map, prefix, key));
    const std::string field = fmt::format("{}{}", prefix, key);
    const std::string hint = fmt::format("give a whole number from {} to {}", min, max);
    if (!node.IsScalar()) return error(field, "is not a whole number", hint);
    std::string_view t = trim(node.Scalar());
    if (!t.empty() && t.front() == '+') t.remove_prefix(1);
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    if (t.empty() || ec != std::errc{} || end != t.data() + t.size()) {
      double d = 0;
      const auto [dend, dec] = std::from_chars(t.data(), t.data() + t.size(), d);
      if (t.empty() || dec != std::errc{} || dend != t.data() + t.size() || !std::isfinite(d) || d != std::floor(d) ||
          std::fabs(d) > 9.0e18)
        return error(field, fmt::format("is not a whole number: '{}'", node.Scalar()), hint);
      value = static_cast<std::int64_t>(d);
    }
    if (value < 0) return error(field, fmt::format("is negative: {}", node.Scalar()), hint);
    if (value < min || value > max) return error(field, fmt::format("is out of range: {}", node.Scalar()), hint);
    return value;
  }

  Expected<LinkTier> link(const YAML::Node& map, std::string_view key) const {
    LOOM_ASSIGN_OR_RETURN(YAML::Node node, mapping(map, "", key, kLinkFields));
    const std::string prefix = fmt::format("{}.", key);
    LinkTier tier;
    LOOM_ASSIGN_OR_RETURN(const std::string kind, text(node, prefix, "kind"));
    Expected<LinkKind> parsed = parse_link_kind(trim(kind));
    if (!parsed) return error(prefix + "kind", parsed.error().message, parsed.error().hint);
    tier.kind = *parsed;
    LOOM_ASSIGN_OR_RETURN(tier.bandwidth, number(node, prefix, "bandwidth", kRate, "bytes/s (one direction, per GPU)"));
    LOOM_ASSIGN_OR_RETURN(tier.latency, number(node, prefix, "latency", kLatency, "seconds"));
    return tier;
  }

  Expected<Cluster> cluster(const YAML::Node& root) const {
    if (!root.IsDefined() || root.IsNull())
      return fail(fmt::format("cluster file '{}' is empty", source_), std::string(kSchemaHint));
    if (!root.IsMap())
      return fail(fmt::format("cluster file '{}': the top level is not a mapping of fields", source_),
                  fmt::format("write the fields {}; {}", known(kTopFields), kSchemaHint));
    LOOM_RETURN_IF_ERROR(check_keys(root, "", kTopFields));
    Cluster c;
    LOOM_ASSIGN_OR_RETURN(c.name, text(root, "", "name"));
    LOOM_ASSIGN_OR_RETURN(const std::int64_t nodes, integer(root, "", "nodes", 1, kMaxNodes));
    LOOM_ASSIGN_OR_RETURN(const std::int64_t gpus, integer(root, "", "gpus_per_node", 1, kMaxGpusPerNode));
    c.nodes = static_cast<int>(nodes);
    c.gpus_per_node = static_cast<int>(gpus);

    LOOM_ASSIGN_OR_RETURN(YAML::Node gpu, mapping(root, "", "gpu", kGpuFields));
    LOOM_ASSIGN_OR_RETURN(c.gpu.name, text(gpu, "gpu.", "name"));
    LOOM_ASSIGN_OR_RETURN(c.gpu.peak_bf16, number(gpu, "gpu.", "peak_bf16", kPeak, "FLOP/s (0 where there is no bf16 path)"));
    LOOM_ASSIGN_OR_RETURN(c.gpu.peak_fp16, number(gpu, "gpu.", "peak_fp16", kPeak, "FLOP/s"));
    LOOM_ASSIGN_OR_RETURN(c.gpu.peak_fp32, number(gpu, "gpu.", "peak_fp32", kPeak, "FLOP/s"));
    if (c.gpu.peak_bf16 == 0 && c.gpu.peak_fp16 == 0 && c.gpu.peak_fp32 == 0)
      return error("gpu.peak_fp32", "is zero, as are peak_bf16 and peak_fp16",
                   "give at least one peak in FLOP/s, e.g. peak_fp32: 1.95e13");
    LOOM_ASSIGN_OR_RETURN(c.gpu.memory_bytes,
                          integer(gpu, "gpu.", "memory_bytes", 1, std::numeric_limits<std::int64_t>::max() / 2));
    LOOM_ASSIGN_OR_RETURN(c.gpu.memory_bandwidth, number(gpu, "gpu.", "memory_bandwidth", kRate, "bytes/s"));

    LOOM_ASSIGN_OR_RETURN(c.intra, link(root, "intra"));
    LOOM_ASSIGN_OR_RETURN(c.inter, link(root, "inter"));
    if (root["bridge"].IsDefined()) {
      LOOM_ASSIGN_OR_RETURN(const LinkTier bridge, link(root, "bridge"));
      c.bridge = PairBridge{bridge};
    }
    LOOM_ASSIGN_OR_RETURN(const std::int64_t nics, integer(root, "", "nics_per_node", 1, kMaxNics));
    c.nics_per_node = static_cast<int>(nics);
    LOOM_ASSIGN_OR_RETURN(c.nic_bandwidth, number(root, "", "nic_bandwidth", kRate, "bytes/s (one NIC, one direction)"));
    if (root["comm_contention"].IsDefined()) {  // optional: 1, no slowdown
      LOOM_ASSIGN_OR_RETURN(c.comm_contention,
                            number(root, "", "comm_contention", kContention, "slowdown of communication beside compute"));
      if (c.comm_contention < 1)
        return error("comm_contention", fmt::format("is below 1: {}", c.comm_contention),
                     "give 1 (communication beside compute runs at full speed) or a measured slowdown above it");
    }
    if (root["host"].IsDefined()) {
      LOOM_ASSIGN_OR_RETURN(c.host, host(root, c.gpus_per_node));
    }
    if (root["shared_cores"].IsDefined()) {
      LOOM_ASSIGN_OR_RETURN(c.shared, shared(root));
    }
    return c;
  }

  // Optional; `cores` is required in it, the other fields default to SharedCores's.
  Expected<SharedCores> shared(const YAML::Node& root) const {
    LOOM_ASSIGN_OR_RETURN(YAML::Node node, mapping(root, "", "shared_cores", kSharedFields));
    SharedCores s;
    LOOM_ASSIGN_OR_RETURN(const std::int64_t cores, integer(node, "shared_cores.", "cores", 1, 1 << 20));
    s.cores = static_cast<int>(cores);
    if (node["core_sharing"].IsDefined()) {
      LOOM_ASSIGN_OR_RETURN(s.core_sharing, number(node, "shared_cores.", "core_sharing", kSharing,
                                                   "slowdown per process beyond the cores, over the cores"));
    }
    if (node["time_scale"].IsDefined()) {
      LOOM_ASSIGN_OR_RETURN(s.time_scale, number(node, "shared_cores.", "time_scale", kScale,
                                                 "factor on every modelled compute time"));
    }
    if (node["instruction_overhead"].IsDefined()) {
      LOOM_ASSIGN_OR_RETURN(s.instruction_overhead, number(node, "shared_cores.", "instruction_overhead", kLatency,
                                                           "seconds per instruction"));
    }
    if (node["comm_sharing"].IsDefined()) {
      LOOM_ASSIGN_OR_RETURN(s.comm_sharing, number(node, "shared_cores.", "comm_sharing", kSharing,
                                                   "communication's slowdown per process beyond the cores, over the cores"));
    }
    if (node["collective_overhead"].IsDefined()) {
      LOOM_ASSIGN_OR_RETURN(s.collective_overhead, number(node, "shared_cores.", "collective_overhead", kLatency,
                                                          "seconds every collective adds to its link's price"));
    }
    // A kind's own α-β: both or neither (the link's).
    const struct {
      std::string_view kind, what;
      double& latency;
      double& bandwidth;
    } kinds[] = {{"p2p", "point-to-point transfer", s.p2p_latency, s.p2p_bandwidth},
                 {"all_gather", "all-gather's ring hop", s.all_gather_latency, s.all_gather_bandwidth},
                 {"reduce_scatter", "reduce-scatter's ring hop", s.reduce_scatter_latency, s.reduce_scatter_bandwidth}};
    for (const auto& k : kinds) {
      const std::string bandwidth = fmt::format("{}_bandwidth", k.kind), latency = fmt::format("{}_latency", k.kind);
      if (node[bandwidth].IsDefined()) {
        LOOM_ASSIGN_OR_RETURN(k.bandwidth, number(node, "shared_cores.", bandwidth, kRate, fmt::format("bytes/s of a {}", k.what)));
      }
      if (node[latency].IsDefined()) {
        LOOM_ASSIGN_OR_RETURN(k.latency, number(node, "shared_cores.", latency, kLatency, fmt::format("seconds per {}", k.what)));
        if (k.bandwidth == 0)
          return error("shared_cores." + latency, fmt::format("is given without {}", bandwidth),
                       "give both (its own α-β) or neither (the link's)");
      }
    }
    return s;
  }

  // Optional, and so is each of its fields: HostSpec's defaults stand for those left out.
  Expected<HostSpec> host(const YAML::Node& root, int gpus_per_node) const {
    LOOM_ASSIGN_OR_RETURN(YAML::Node node, mapping(root, "", "host", kHostFields));
    HostSpec h;
    if (node["pcie_bandwidth"].IsDefined()) {
      LOOM_ASSIGN_OR_RETURN(h.pcie_bandwidth, number(node, "host.", "pcie_bandwidth", kRate, "bytes/s (one GPU's link, one direction)"));
    }
    if (node["gpus_per_pcie_switch"].IsDefined()) {
      LOOM_ASSIGN_OR_RETURN(const std::int64_t n, integer(node, "host.", "gpus_per_pcie_switch", 1, gpus_per_node));
      h.gpus_per_pcie_switch = static_cast<int>(n);
    }
    if (node["cpu_adam_params_per_second"].IsDefined()) {
      LOOM_ASSIGN_OR_RETURN(h.cpu_adam_params_per_second,
                            number(node, "host.", "cpu_adam_params_per_second", kRate, "parameters/s (one node's CPUs)"));
    }
    if (node["memory_bytes"].IsDefined()) {
      LOOM_ASSIGN_OR_RETURN(h.memory_bytes, integer(node, "host.", "memory_bytes", 1, std::numeric_limits<std::int64_t>::max() / 2));
    }
    return h;
  }

 private:
  std::string_view source_;
};

void write_link(std::string& out, std::string_view key, const LinkTier& tier) {
  out += fmt::format("{}:\n", key);
  out += fmt::format("  kind: {}\n", name(tier.kind));
  out += fmt::format("  bandwidth: {}  # bytes/s, one direction, per GPU\n", tier.bandwidth);
  out += fmt::format("  latency: {}  # seconds per message\n", tier.latency);
}

}  // namespace

Expected<LinkKind> parse_link_kind(std::string_view text) {
  for (const LinkKind kind : {LinkKind::nvlink, LinkKind::nvswitch, LinkKind::pcie, LinkKind::infiniband, LinkKind::roce})
    if (text == name(kind)) return kind;
  if (text == "ib") return LinkKind::infiniband;
  if (text == "local")
    return fail("link kind 'local' is not a link between GPUs", fmt::format("use one of {}", kLinkKinds));
  return fail(fmt::format("unknown link kind '{}'", text), fmt::format("use one of {}", kLinkKinds));
}

bool is_cluster_file_path(std::string_view text) {
  return text.ends_with(".yaml") || text.ends_with(".yml") || text.ends_with(".json");
}

Expected<Cluster> parse_cluster_yaml(std::string_view text, std::string_view source) {
  LOOM_ASSIGN_OR_RETURN(const YAML::Node root,
                        load_one_yaml_document(text, source, {.what = "cluster file", .one = "one cluster",
                                                              .schema = kSchemaHint}));
  try {
    return Reader(source).cluster(root);
  } catch (const std::exception& e) {  // yaml-cpp may throw on odd node shapes; never let it escape
    return fail(fmt::format("cluster file '{}': cannot read: {}", source, e.what()), std::string(kSchemaHint));
  }
}

Expected<Cluster> load_cluster_file(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(const std::string text,
                        read_input_file(path, "cluster file",
                                        "a cluster file ends in .yaml, .yml or .json and is a few dozen lines; "
                                        "`loom clusters` lists the presets",
                                        kMaxFileBytes));
  return parse_cluster_yaml(text, path);
}

std::string cluster_to_yaml(const Cluster& c) {
  // fmt's "{}" writes the shortest text that reads back to the same double.
  std::string out = "# Loom cluster file (docs/clusters.md)\n";
  out += fmt::format("name: {}\n", loom::quoted(c.name));
  out += fmt::format("nodes: {}\n", c.nodes);
  out += fmt::format("gpus_per_node: {}\n", c.gpus_per_node);
  out += "gpu:\n";
  out += fmt::format("  name: {}\n", loom::quoted(c.gpu.name));
  out += fmt::format("  peak_bf16: {}  # FLOP/s, dense\n", c.gpu.peak_bf16);
  out += fmt::format("  peak_fp16: {}  # FLOP/s, dense\n", c.gpu.peak_fp16);
  out += fmt::format("  peak_fp32: {}  # FLOP/s\n", c.gpu.peak_fp32);
  out += fmt::format("  memory_bytes: {}\n", c.gpu.memory_bytes);
  out += fmt::format("  memory_bandwidth: {}  # bytes/s\n", c.gpu.memory_bandwidth);
  write_link(out, "intra", c.intra);
  write_link(out, "inter", c.inter);
  if (c.bridge) write_link(out, "bridge", c.bridge->tier);
  out += fmt::format("nics_per_node: {}\n", c.nics_per_node);
  out += fmt::format("nic_bandwidth: {}  # bytes/s, one NIC, one direction\n", c.nic_bandwidth);
  out += fmt::format("comm_contention: {}  # communication's slowdown beside compute (1: none)\n", c.comm_contention);
  out += "host:  # each node's host, for offloaded optimizers (--offload)\n";
  out += fmt::format("  pcie_bandwidth: {}  # bytes/s, one GPU's link to host memory, one direction\n", c.host.pcie_bandwidth);
  out += fmt::format("  gpus_per_pcie_switch: {}  # GPUs sharing one switch's uplink\n", c.host.gpus_per_pcie_switch);
  out += fmt::format("  cpu_adam_params_per_second: {}  # the node's CPUs, Adam\n", c.host.cpu_adam_params_per_second);
  out += fmt::format("  memory_bytes: {}\n", c.host.memory_bytes);
  if (c.shared.cores > 0) {
    out += "shared_cores:  # the devices are processes sharing these cores (docs/calibration.md)\n";
    out += fmt::format("  cores: {}\n", c.shared.cores);
    out += fmt::format("  core_sharing: {}  # slowdown 1 + this x (processes - cores) / cores\n", c.shared.core_sharing);
    out += fmt::format("  time_scale: {}  # factor on every modelled compute time\n", c.shared.time_scale);
    out += fmt::format("  instruction_overhead: {}  # seconds per instruction\n", c.shared.instruction_overhead);
    out += fmt::format("  comm_sharing: {}  # communication's slowdown 1 + this x (processes - cores) / cores\n",
                       c.shared.comm_sharing);
    if (c.shared.p2p_bandwidth > 0) {
      out += fmt::format("  p2p_latency: {}  # seconds per point-to-point transfer\n", c.shared.p2p_latency);
      out += fmt::format("  p2p_bandwidth: {}  # bytes/s of a point-to-point transfer\n", c.shared.p2p_bandwidth);
    }
    if (c.shared.collective_overhead > 0)
      out += fmt::format("  collective_overhead: {}  # seconds every collective adds to its link's price\n",
                         c.shared.collective_overhead);
    if (c.shared.all_gather_bandwidth > 0) {
      out += fmt::format("  all_gather_latency: {}  # seconds per ring hop of an all-gather\n", c.shared.all_gather_latency);
      out += fmt::format("  all_gather_bandwidth: {}  # bytes/s of an all-gather's ring\n", c.shared.all_gather_bandwidth);
    }
    if (c.shared.reduce_scatter_bandwidth > 0) {
      out += fmt::format("  reduce_scatter_latency: {}  # seconds per ring hop of a reduce-scatter\n",
                         c.shared.reduce_scatter_latency);
      out += fmt::format("  reduce_scatter_bandwidth: {}  # bytes/s of a reduce-scatter's ring\n",
                         c.shared.reduce_scatter_bandwidth);
    }
  }
  return out;
}

}  // namespace loom::cluster
