#include "loom/cluster/cluster_file.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "loom/cluster/presets.h"

namespace loom::cluster {
namespace {

namespace fs = std::filesystem;

fs::path write_temp(const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / "loom_cluster_file_test";
  fs::create_directories(dir);
  const fs::path path = dir / name;
  std::ofstream(path) << text;
  return path;
}

// A valid file in the schema; the bad-input tests edit one line of it.
const std::string kValid = R"(name: mine
nodes: 2
gpus_per_node: 4
gpu:
  name: RTX3090
  peak_bf16: 71e12
  peak_fp16: 7.1e13
  peak_fp32: 35.6e12
  memory_bytes: 25769803776
  memory_bandwidth: 936e9
intra:
  kind: pcie
  bandwidth: 31.5e9
  latency: 2e-6
inter:
  kind: infiniband
  bandwidth: 3.125e9
  latency: 5e-6
bridge:
  kind: nvlink
  bandwidth: 56.25e9
  latency: 1e-6
nics_per_node: 1
nic_bandwidth: 12.5e9
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(ClusterFile, EveryPresetRoundTripsThroughYaml) {
  for (const std::string& preset : preset_names()) {
    for (const std::string& name : {preset, preset + "x3"}) {
      Expected<Cluster> c = make_cluster(name);
      ASSERT_TRUE(c.has_value()) << name;
      const std::string yaml = cluster_to_yaml(*c);
      Expected<Cluster> back = parse_cluster_yaml(yaml, name);
      ASSERT_TRUE(back.has_value()) << name << ": " << back.error().to_string() << "\n" << yaml;
      EXPECT_EQ(*back, *c) << yaml;
      EXPECT_EQ(cluster_to_yaml(*back), yaml);
    }
  }
}

// Found by fuzz/cluster_fuzz.cc: yaml-cpp 0.7 looped forever (allocating) on a comma opening a token outside
// a flow collection; `loom plan --cluster` hung. The reader refuses it first (core/yaml_comma_guard.h).
TEST(ClusterFile, AStrayCommaIsAnErrorNotAHang) {
  const auto cluster = parse_cluster_yaml("\n\n, 6}}\n", "c.yaml");
  ASSERT_FALSE(cluster);
  EXPECT_EQ(cluster.error().message, "cluster file 'c.yaml': malformed YAML at line 3, column 1: a ',' outside [ ] or { }");
  EXPECT_FALSE(parse_cluster_yaml("{\"name\": \"x\", \"nodes\": 1},\n", "c.json"));
}

TEST(ClusterFile, BridgeIsWrittenOnlyWhenPresent) {
  EXPECT_NE(cluster_to_yaml(*make_cluster("rtx3090-nvlink")).find("bridge:"), std::string::npos);
  EXPECT_EQ(cluster_to_yaml(*make_cluster("rtx3090")).find("bridge"), std::string::npos);
}

TEST(ClusterFile, ReadsAValidYamlFile) {
  const fs::path path = write_temp("valid.yaml", kValid);
  Expected<Cluster> c = load_cluster_file(path.string());
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_EQ(c->name, "mine");
  EXPECT_EQ(c->device_count(), 8);
  EXPECT_DOUBLE_EQ(c->gpu.peak_fp16, 71e12);
  EXPECT_EQ(c->gpu.memory_bytes, 24LL << 30);
  EXPECT_EQ(c->intra.kind, LinkKind::pcie);
  ASSERT_TRUE(c->bridge.has_value());
  EXPECT_EQ(c->bridge->tier.kind, LinkKind::nvlink);
  // The bridge is used between local GPUs 0-1 and 2-3, PCIe between 1-2, the NIC between nodes.
  EXPECT_EQ(link_between(*c, 2, 3).kind, LinkKind::nvlink);
  EXPECT_EQ(link_between(*c, 1, 2).kind, LinkKind::pcie);
  EXPECT_EQ(link_between(*c, 3, 4).kind, LinkKind::infiniband);
  EXPECT_EQ(c->comm_contention, 1.0);  // optional: no slowdown
}

// comm_contention (cluster.h): optional, read as given, 1 or more.
TEST(ClusterFile, ReadsCommContention) {
  const fs::path path = write_temp("contention.yaml", kValid + "comm_contention: 1.25\n");
  Expected<Cluster> c = load_cluster_file(path.string());
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_EQ(c->comm_contention, 1.25);
  EXPECT_EQ(parse_cluster_yaml(cluster_to_yaml(*c), "again").value_or(Cluster{}).comm_contention, 1.25);
  const fs::path below = write_temp("below.yaml", kValid + "comm_contention: 0.5\n");
  Expected<Cluster> bad = load_cluster_file(below.string());
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("field 'comm_contention' is below 1: 0.5"), std::string::npos)
      << bad.error().message;
}

// shared_cores (cluster.h, SharedCores): optional; cores required in it, the rest defaulted; written back
// only when set; and the slowdown it gives W processes.
TEST(ClusterFile, ReadsSharedCores) {
  const fs::path path = write_temp("shared.yaml", kValid + "shared_cores:\n  cores: 2\n  time_scale: 1.5\n");
  Expected<Cluster> c = load_cluster_file(path.string());
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_EQ(c->shared, (SharedCores{.cores = 2, .core_sharing = 1, .time_scale = 1.5, .instruction_overhead = 0}));
  EXPECT_EQ(parse_cluster_yaml(cluster_to_yaml(*c), "again").value_or(Cluster{}).shared, c->shared);
  EXPECT_EQ(c->shared.slowdown(2), 1);
  EXPECT_EQ(c->shared.slowdown(4), 2);  // 4 processes on 2 cores, fully shared
  EXPECT_EQ((SharedCores{.cores = 2, .core_sharing = 0.5}).slowdown(3), 1.25);
  EXPECT_EQ(SharedCores{}.slowdown(8), 1);  // not shared: a GPU each
  // A transfer's own α-β: read, and written back.
  Expected<Cluster> p2p = parse_cluster_yaml(
      kValid + "shared_cores:\n  cores: 2\n  p2p_latency: 2e-4\n  p2p_bandwidth: 3e9\n", "p2p");
  ASSERT_TRUE(p2p) << p2p.error().message;
  EXPECT_EQ(p2p->shared.p2p_latency, 2e-4);
  EXPECT_EQ(p2p->shared.p2p_bandwidth, 3e9);
  EXPECT_EQ(parse_cluster_yaml(cluster_to_yaml(*p2p), "again").value_or(Cluster{}).shared, p2p->shared);
  // An all-gather's and a reduce-scatter's own α-β likewise.
  Expected<Cluster> kinds = parse_cluster_yaml(kValid + "shared_cores:\n  cores: 2\n  all_gather_latency: 1e-4\n"
                                               "  all_gather_bandwidth: 1e9\n  reduce_scatter_latency: 3e-4\n"
                                               "  reduce_scatter_bandwidth: 4e8\n  collective_overhead: 1.5e-3\n", "kinds");
  ASSERT_TRUE(kinds) << kinds.error().message;
  EXPECT_EQ(kinds->shared.all_gather_latency, 1e-4);
  EXPECT_EQ(kinds->shared.all_gather_bandwidth, 1e9);
  EXPECT_EQ(kinds->shared.reduce_scatter_latency, 3e-4);
  EXPECT_EQ(kinds->shared.reduce_scatter_bandwidth, 4e8);
  EXPECT_EQ(kinds->shared.collective_overhead, 1.5e-3);
  EXPECT_EQ(parse_cluster_yaml(cluster_to_yaml(*kinds), "again").value_or(Cluster{}).shared, kinds->shared);
  EXPECT_EQ(cluster_to_yaml(*make_cluster("dgx-a100")).find("shared_cores"), std::string::npos);
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"shared_cores:\n  time_scale: 2\n", "shared_cores.cores"},
           {"shared_cores:\n  cores: 2\n  core_sharing: -1\n", "shared_cores.core_sharing' is negative"},
           {"shared_cores:\n  cores: 2\n  time_scale: 0\n", "shared_cores.time_scale' is zero"},
           {"shared_cores:\n  cores: 2\n  speed: 2\n", "speed"},
           {"shared_cores:\n  cores: 2\n  p2p_latency: 1e-4\n", "without p2p_bandwidth"},
           {"shared_cores:\n  cores: 2\n  reduce_scatter_latency: 1e-4\n", "without reduce_scatter_bandwidth"},
           {"shared_cores:\n  cores: 2\n  p2p_bandwidth: 0\n  p2p_latency: 1e-4\n", "shared_cores.p2p_bandwidth"}}) {
    Expected<Cluster> bad = parse_cluster_yaml(kValid + text, "bad.yaml");
    ASSERT_FALSE(bad.has_value()) << text;
    EXPECT_NE(bad.error().message.find(message), std::string::npos) << bad.error().message;
  }
}

TEST(ClusterFile, ReadsAJsonFileAndMakeClusterAcceptsPaths) {
  const std::string json = R"({"name": "a100-json", "nodes": 4, "gpus_per_node": 8,
    "gpu": {"name": "A100", "peak_bf16": 3.12e14, "peak_fp16": 3.12e14, "peak_fp32": 1.95e13,
            "memory_bytes": 85899345920, "memory_bandwidth": 2e12},
    "intra": {"kind": "nvswitch", "bandwidth": 3e11, "latency": 1e-6},
    "inter": {"kind": "ib", "bandwidth": 2.5e10, "latency": 5e-6},
    "nics_per_node": 8, "nic_bandwidth": 2.5e10})";
  const fs::path path = write_temp("a100.json", json);
  Expected<Cluster> c = make_cluster(path.string());
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_EQ(c->name, "a100-json");
  EXPECT_EQ(c->device_count(), 32);
  EXPECT_EQ(c->inter.kind, LinkKind::infiniband);
  EXPECT_FALSE(c->bridge.has_value());
  Expected<Cluster> preset = make_cluster("dgx-a100x4");
  ASSERT_TRUE(preset.has_value());
  EXPECT_EQ(c->intra, preset->intra);
  EXPECT_EQ(c->inter, preset->inter);
}

TEST(ClusterFile, AMissingFileIsAnError) {
  Expected<Cluster> c = load_cluster_file("/nonexistent/dir/c.yaml");
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("/nonexistent/dir/c.yaml"), std::string::npos);
  EXPECT_NE(c.error().message.find("no such file"), std::string::npos);
  EXPECT_FALSE(c.error().hint.empty());
  Expected<Cluster> through_presets = make_cluster("/nonexistent/dir/c.yml");
  ASSERT_FALSE(through_presets.has_value());
  EXPECT_FALSE(load_cluster_file(fs::temp_directory_path().string()).has_value());  // a directory
}

struct BadCase {
  const char* what;
  std::string text;
  const char* expected;  // in the message
};

// The host of offloaded optimizers is optional, and so is each of its fields: HostSpec's defaults stand in.
TEST(ClusterFile, ReadsTheHostAndDefaultsWhatItLeavesOut) {
  Expected<Cluster> bare = parse_cluster_yaml(kValid, "bare");
  ASSERT_TRUE(bare.has_value()) << bare.error().to_string();
  EXPECT_EQ(bare->host, HostSpec{});
  Expected<Cluster> some = parse_cluster_yaml(kValid + "host:\n  pcie_bandwidth: 24e9\n  gpus_per_pcie_switch: 4\n", "some");
  ASSERT_TRUE(some.has_value()) << some.error().to_string();
  EXPECT_EQ(some->host.pcie_bandwidth, 24e9);
  EXPECT_EQ(some->host.gpus_per_pcie_switch, 4);
  EXPECT_EQ(some->host.cpu_adam_params_per_second, HostSpec{}.cpu_adam_params_per_second);
  EXPECT_EQ(some->pcie_share(), 6e9);
  EXPECT_EQ(some->cpu_adam_share(), HostSpec{}.cpu_adam_params_per_second / 4);
  EXPECT_EQ(parse_cluster_yaml(cluster_to_yaml(*some), "again").value_or(Cluster{}).host, some->host);
  const auto refused = [](const std::string& host, std::string_view says) {
    Expected<Cluster> c = parse_cluster_yaml(kValid + host, "bad");
    ASSERT_FALSE(c.has_value()) << host;
    EXPECT_NE(c.error().message.find(says), std::string::npos) << c.error().message;
  };
  refused("host:\n  pcie_bandwidth: 0\n", "field 'host.pcie_bandwidth' is zero");
  refused("host:\n  gpus_per_pcie_switch: 8\n", "field 'host.gpus_per_pcie_switch' is out of range");
  refused("host:\n  pcie: 1\n", "unknown field 'host.pcie'");
}

TEST(ClusterFile, BadInputNamesTheFileAndTheField) {
  const BadCase cases[] = {
      {"malformed", "name: [unclosed\nnodes: 1\n", "malformed YAML at line"},
      {"malformed json", "{\"name\": \"x\", ", "malformed YAML"},
      {"empty", "", "is empty"},
      {"not a mapping", "- 1\n- 2\n", "top level is not a mapping"},
      {"missing nodes", replace(kValid, "nodes: 2\n", ""), "field 'nodes' is missing"},
      {"missing gpu field", replace(kValid, "  memory_bandwidth: 936e9\n", ""), "field 'gpu.memory_bandwidth' is missing"},
      {"missing link field", replace(kValid, "  latency: 5e-6\n", ""), "field 'inter.latency' is missing"},
      {"missing gpu", replace(replace(replace(replace(replace(replace(replace(kValid, "gpu:\n", ""), "  name: RTX3090\n", ""),
                                                                  "  peak_bf16: 71e12\n", ""), "  peak_fp16: 7.1e13\n", ""),
                                              "  peak_fp32: 35.6e12\n", ""), "  memory_bytes: 25769803776\n", ""),
                              "  memory_bandwidth: 936e9\n", ""),
       "field 'gpu' is missing"},
      {"negative nodes", replace(kValid, "nodes: 2", "nodes: -2"), "field 'nodes' is negative"},
      {"zero gpus", replace(kValid, "gpus_per_node: 4", "gpus_per_node: 0"), "field 'gpus_per_node' is out of range"},
      {"fractional nodes", replace(kValid, "nodes: 2", "nodes: 2.5"), "field 'nodes' is not a whole number"},
      {"negative bandwidth", replace(kValid, "bandwidth: 31.5e9", "bandwidth: -31.5e9"), "field 'intra.bandwidth' is negative"},
      {"zero bandwidth", replace(kValid, "bandwidth: 3.125e9", "bandwidth: 0"), "field 'inter.bandwidth' is zero"},
      {"negative latency", replace(kValid, "latency: 1e-6", "latency: -1e-6"), "field 'bridge.latency' is negative"},
      {"negative peak", replace(kValid, "peak_fp32: 35.6e12", "peak_fp32: -1"), "field 'gpu.peak_fp32' is negative"},
      {"text number", replace(kValid, "memory_bandwidth: 936e9", "memory_bandwidth: fast"),
       "field 'gpu.memory_bandwidth' is not a number: 'fast'"},
      {"infinite number", replace(kValid, "nic_bandwidth: 12.5e9", "nic_bandwidth: inf"), "field 'nic_bandwidth' is not a number"},
      {"unknown kind", replace(kValid, "kind: pcie", "kind: ethernet"), "field 'intra.kind' unknown link kind 'ethernet'"},
      {"local kind", replace(kValid, "kind: infiniband", "kind: local"), "field 'inter.kind' link kind 'local'"},
      {"link not a map", replace(replace(replace(replace(kValid, "intra:\n", "intra: pcie\n"), "  kind: pcie\n", ""),
                                         "  bandwidth: 31.5e9\n", ""), "  latency: 2e-6\n", ""),
       "field 'intra' is not a mapping"},
      {"unknown field", replace(kValid, "nodes: 2\n", "nodes: 2\nnode_count: 2\n"), "unknown field 'node_count'"},
      // Issue 17: values that made predictions nonsense, and YAML that was read differently than written.
      {"huge latency", replace(kValid, "latency: 5e-6", "latency: 1e308"), "field 'inter.latency' is out of range: 1e308"},
      {"tiny bandwidth", replace(kValid, "bandwidth: 3.125e9", "bandwidth: 1e-300"),
       "field 'inter.bandwidth' is out of range: 1e-300"},
      {"huge peak", replace(kValid, "peak_fp32: 35.6e12", "peak_fp32: 1e300"), "field 'gpu.peak_fp32' is out of range"},
      {"duplicate key", replace(kValid, "nodes: 2\n", "nodes: 2\nnodes: 3\n"),
       "field 'nodes' is given twice (again at line 3)"},
      {"duplicate nested key", replace(kValid, "  kind: pcie\n", "  kind: pcie\n  kind: nvlink\n"),
       "field 'intra.kind' is given twice"},
      {"two documents", kValid + "---\n" + kValid, "holds 2 YAML documents (separated by '---'), not one"},
      {"unknown gpu field", replace(kValid, "  peak_bf16: 71e12\n", "  peak_bf16: 71e12\n  peak_fp8: 1e15\n"),
       "unknown field 'gpu.peak_fp8'"},
      {"null value", replace(kValid, "nics_per_node: 1", "nics_per_node:"), "field 'nics_per_node' has no value"},
      {"list as number", replace(kValid, "nodes: 2", "nodes: [2]"), "field 'nodes' is not a whole number"},
      {"empty name", replace(kValid, "name: mine", "name: ''"), "field 'name' is empty"},
      {"no peaks", replace(replace(replace(kValid, "peak_bf16: 71e12", "peak_bf16: 0"), "peak_fp16: 7.1e13", "peak_fp16: 0"),
                           "peak_fp32: 35.6e12", "peak_fp32: 0"),
       "field 'gpu.peak_fp32' is zero"},
  };
  for (const BadCase& c : cases) {
    const fs::path path = write_temp("bad.yaml", c.text);
    Expected<Cluster> result = load_cluster_file(path.string());
    ASSERT_FALSE(result.has_value()) << c.what;
    EXPECT_NE(result.error().message.find(path.string()), std::string::npos) << c.what << ": " << result.error().message;
    EXPECT_NE(result.error().message.find(c.expected), std::string::npos) << c.what << ": " << result.error().message;
    EXPECT_FALSE(result.error().hint.empty()) << c.what;
  }
}

TEST(ClusterFile, ParseLinkKindInvertsName) {
  for (const LinkKind kind : {LinkKind::nvlink, LinkKind::nvswitch, LinkKind::pcie, LinkKind::infiniband, LinkKind::roce})
    EXPECT_EQ(parse_link_kind(name(kind)), kind);
  EXPECT_FALSE(parse_link_kind("local").has_value());
  EXPECT_FALSE(parse_link_kind("NVLINK").has_value());
}

TEST(ClusterFile, NamesWithQuotesAndBackslashesRoundTrip) {
  Cluster c = *make_cluster("dgx1");
  c.name = "my \"odd\" cluster: \\ #1";
  c.gpu.name = "GPU\tx";
  Expected<Cluster> back = parse_cluster_yaml(cluster_to_yaml(c), "<string>");
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  EXPECT_EQ(*back, c);
}

}  // namespace
}  // namespace loom::cluster
