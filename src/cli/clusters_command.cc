// `loom clusters`: the cluster presets as a table; `--file F` summarizes a cluster file, `--yaml NAME`
// prints a preset (or any cluster make_cluster accepts) as a cluster file to start from; `--json` prints
// the presets (or the file) as JSON, each cluster in the cluster-file form (docs/json.md).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "loom/cluster/cluster_file.h"
#include "loom/cluster/presets.h"

namespace loom::cli {
namespace {

struct ClustersArgs {
  std::string file;
  std::string yaml;
  bool json = false;
};

// "nvswitch 300 GB/s 1 us": kind, one-direction bandwidth per GPU, latency.
std::string link_text(const cluster::LinkTier& tier) {
  return fmt::format("{} {:.4g} GB/s {:.3g} us", cluster::name(tier.kind), tier.bandwidth / 1e9, tier.latency * 1e6);
}

std::string tflops(double flops) { return flops > 0 ? fmt::format("{:.1f}", flops / 1e12) : "-"; }

constexpr std::string_view kRowFormat = "{:<16} {:>12} {:<14} {:>7} {:>7} {:>7} {:>7} {:>8}  {:<27} {:<27} {}\n";

void print_header() {
  fmt::print(fmt::runtime(kRowFormat), "cluster", "nodes x GPUs", "gpu", "bf16 TF", "fp16 TF", "fp32 TF", "mem GiB",
             "HBM TB/s", "intra-node link", "inter-node link", "bridge (GPUs 2k, 2k+1)");
}

void print_legend() {
  fmt::print("TF: peak dense TFLOP/s. Links: kind, bandwidth per GPU in one direction, latency per message.\n");
}

void print_row(const cluster::Cluster& c) {
  fmt::print(fmt::runtime(kRowFormat), c.name, fmt::format("{}x{}", c.nodes, c.gpus_per_node), c.gpu.name,
             tflops(c.gpu.peak_bf16), tflops(c.gpu.peak_fp16), tflops(c.gpu.peak_fp32),
             fmt::format("{:.0f}", static_cast<double>(c.gpu.memory_bytes) / (1 << 30)),
             fmt::format("{:.2f}", c.gpu.memory_bandwidth / 1e12), link_text(c.intra), link_text(c.inter),
             c.bridge ? link_text(c.bridge->tier) : "-");
}

nlohmann::ordered_json link_json(const cluster::LinkTier& tier) {
  return {{"kind", std::string(cluster::name(tier.kind))}, {"bandwidth", tier.bandwidth}, {"latency", tier.latency}};
}

// The cluster-file form (docs/clusters.md): an entry saved alone loads back as the same cluster.
nlohmann::ordered_json cluster_json(const cluster::Cluster& c) {
  nlohmann::ordered_json out = {{"name", c.name},
                                {"nodes", c.nodes},
                                {"gpus_per_node", c.gpus_per_node},
                                {"gpu",
                                 {{"name", c.gpu.name},
                                  {"peak_bf16", c.gpu.peak_bf16},
                                  {"peak_fp16", c.gpu.peak_fp16},
                                  {"peak_fp32", c.gpu.peak_fp32},
                                  {"memory_bytes", c.gpu.memory_bytes},
                                  {"memory_bandwidth", c.gpu.memory_bandwidth}}},
                                {"intra", link_json(c.intra)}};
  if (c.bridge) out["bridge"] = link_json(c.bridge->tier);
  out["inter"] = link_json(c.inter);
  out["nics_per_node"] = c.nics_per_node;
  out["nic_bandwidth"] = c.nic_bandwidth;
  out["comm_contention"] = c.comm_contention;
  out["host"] = {{"pcie_bandwidth", c.host.pcie_bandwidth},
                 {"gpus_per_pcie_switch", c.host.gpus_per_pcie_switch},
                 {"cpu_adam_params_per_second", c.host.cpu_adam_params_per_second},
                 {"memory_bytes", c.host.memory_bytes}};
  return out;
}

void print_json(const std::vector<cluster::Cluster>& clusters) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const cluster::Cluster& c : clusters) list.push_back(cluster_json(c));
  fmt::print("{}\n", nlohmann::ordered_json{{"schema", "loom.clusters/1"}, {"clusters", list}}.dump(2));
}

int run_clusters(const ClustersArgs& args) {
  if (!args.yaml.empty()) {
    Expected<cluster::Cluster> c = with_context(cluster::make_cluster(args.yaml), "option --yaml");
    if (!c) return report(c.error());
    fmt::print("{}", cluster::cluster_to_yaml(*c));
    return 0;
  }
  if (!args.file.empty()) {
    Expected<cluster::Cluster> c = with_context(cluster::load_cluster_file(args.file), "option --file");
    if (!c) return report(c.error());
    if (args.json) {
      print_json({*c});
      return 0;
    }
    print_header();
    print_row(*c);
    print_legend();
    fmt::print("{} devices; {} NIC(s) per node at {:.4g} Gb/s each\n", c->device_count(), c->nics_per_node,
               c->nic_bandwidth * 8 / 1e9);
    return 0;
  }
  std::vector<cluster::Cluster> presets;
  for (const std::string& name : cluster::preset_names()) {
    Expected<cluster::Cluster> c = cluster::make_cluster(name);
    if (!c) return report(c.error());
    presets.push_back(*std::move(c));
  }
  if (args.json) {
    print_json(presets);
    return 0;
  }
  print_header();
  for (const cluster::Cluster& c : presets) print_row(c);
  print_legend();
  fmt::print("more nodes: \"<preset>x<nodes>\" (e.g. dgx-a100x16); a file: --cluster my.yaml "
             "(`loom clusters --yaml dgx-a100` prints one to start from; docs/clusters.md)\n");
  return 0;
}

}  // namespace

void add_clusters_command(CLI::App& app) {
  auto args = std::make_shared<ClustersArgs>();
  CLI::App* cmd = app.add_subcommand("clusters", "List the cluster presets, summarize a cluster file, or print one");
  CLI::Option* file = cmd->add_option("--file", args->file, "Summarize this cluster file (.yaml, .yml or .json)");
  CLI::Option* yaml =
      cmd->add_option("--yaml", args->yaml, "Print this preset (e.g. dgx-a100 or dgx-a100x4) as a cluster file");
  CLI::Option* json = cmd->add_flag("--json", args->json, "Print the presets (or --file) as JSON (docs/json.md)");
  yaml->excludes(file)->excludes(json);
  on_selected(cmd, [args] { return run_clusters(*args); });
}

}  // namespace loom::cli
