// Coshard's regions (policy/coshard.h): Megatron's tensor-parallel regions, grouped, classed and selected.
#include "loom/policy/coshard.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "loom/core/disjoint_sets.h"
#include "loom/core/strings.h"
#include "loom/plan/primitives.h"
#include "loom/policy/stages.h"
#include "loom/policy/tensor_parallel.h"

namespace loom::policy {
namespace {

constexpr std::string_view kRangeHint = "write A:B for layers A to B-1 (numbered from 0), A: or :B";

Expected<int> parse_bound(std::string_view text, std::string_view range) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < 0)
    return fail(fmt::format("layer range '{}': '{}' is not a layer number", range, text), std::string(kRangeHint));
  return value;
}

// The connected groups of split forward ops: an op joins the producer of each split activation it reads.
std::vector<std::vector<ir::OpId>> connected_regions(const ir::Graph& graph, const TensorParallelLayout& layout) {
  DisjointSets regions(graph.ops.size());
  const std::vector<ir::OpId> producers = ir::producers(graph);
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || !layout.splits[op.id.index()]) continue;
    for (ir::TensorId in : op.inputs) {
      const ir::OpId p = producers[in.index()];
      if (p.valid() && layout.splits[p.index()] && layout.tensor_dims[in.index()] >= 0)
        regions.unite(op.id.index(), p.index());
    }
  }
  std::vector<std::vector<ir::OpId>> groups(graph.ops.size());
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward && layout.splits[op.id.index()]) groups[regions.find(op.id.index())].push_back(op.id);
  std::erase_if(groups, [](const auto& g) { return g.empty(); });
  std::ranges::sort(groups, {}, [](const auto& g) { return g.front().value; });
  return groups;
}

// Sources (reading no op of the region) and sinks (read by none), for the chains' order edges.
void find_ends(const ir::Graph& graph, CoshardRegion& region) {
  const auto in_region = [&](ir::OpId op) { return std::ranges::find(region.ops, op) != region.ops.end(); };
  const std::vector<ir::OpId> producers = ir::producers(graph);
  std::vector<char> read(graph.ops.size(), 0);
  for (ir::OpId id : region.ops) {
    bool reads_region = false;
    for (ir::TensorId in : graph.op(id).inputs) {
      const ir::OpId p = producers[in.index()];
      if (p.valid() && in_region(p)) {
        reads_region = true;
        read[p.index()] = 1;
      }
    }
    if (!reads_region) region.sources.push_back(id);
  }
  for (ir::OpId id : region.ops)
    if (!read[id.index()]) region.sinks.push_back(id);
}

// tp x parts must divide every dimension a cosharded op splits.
Expected<void> check_divisible(const plan::Plan& plan, ir::OpId id, const std::string& x, int tp, int parts) {
  const ir::Graph& graph = *plan.graph;
  const ir::Op& op = graph.op(id);
  const plan::SubOpId any = plan.parts[id.index()].front();
  const int n = tp * parts;
  for (const bool output : {false, true}) {
    const auto& tensors = output ? op.outputs : op.inputs;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const ir::FullTensor& t = graph.tensor(tensors[i]);
      for (std::size_t d = 0; d < t.shape.rank(); ++d) {
        if (plan::dim_identifier(plan, any, output, i, d) != x || t.shape[d] % n == 0) continue;
        return fail(fmt::format("coshard {} with tp {}: op '{}' ({}) is split along '{}', which has {} elements in "
                                "'{}' {}; tp x coshard = {} does not divide {}",
                                parts, tp, op.name, op.type, x, t.shape[d], t.name, t.shape.to_string(), n,
                                t.shape[d]),
                    fmt::format("choose a coshard C dividing {} / tp (the heads or FFN width of one tp rank), or "
                                "coshard fewer ops (--coshard-ops, --coshard-layers)",
                                t.shape[d]));
      }
    }
  }
  return {};
}

// The dimension each parameter a cosharded op reads, and each activation it writes, is split along:
// where the op's identifier sits in it.
void record_tensor_dims(const plan::Plan& plan, ir::OpId id, const std::string& x, std::vector<int>& dims) {
  const ir::Graph& graph = *plan.graph;
  const ir::Op& op = graph.op(id);
  const plan::SubOpId any = plan.parts[id.index()].front();
  for (const bool output : {false, true}) {
    const auto& tensors = output ? op.outputs : op.inputs;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const ir::FullTensor& t = graph.tensor(tensors[i]);
      if (!output && t.role != ir::TensorRole::parameter) continue;
      for (std::size_t d = 0; d < t.shape.rank(); ++d)
        if (plan::dim_identifier(plan, any, output, i, d) == x) {
          dims[tensors[i].index()] = static_cast<int>(d);
          break;
        }
    }
  }
}

// A fused attention op, or the softmax of eager attention (models::AttentionImpl::eager): no MLP region
// holds a softmax.
bool holds_attention(const ir::Graph& graph, const std::vector<ir::OpId>& ops, const ir::OpCatalog& catalog) {
  return std::ranges::any_of(ops, [&](ir::OpId id) {
    const ir::OpDef* def = catalog.find(graph.op(id).type);
    return def != nullptr && (def->op_class == ir::OpClass::attention || def->type == "softmax");
  });
}

}  // namespace

Expected<LayerRange> parse_layer_range(std::string_view text) {
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos || text.find(':', colon + 1) != std::string_view::npos)
    return fail(fmt::format("'{}' is not a layer range", text), std::string(kRangeHint));
  LayerRange range;
  if (const std::string_view first = trim(text.substr(0, colon)); !first.empty()) {
    LOOM_ASSIGN_OR_RETURN(range.first, parse_bound(first, text));
  }
  if (const std::string_view end = trim(text.substr(colon + 1)); !end.empty()) {
    LOOM_ASSIGN_OR_RETURN(range.end, parse_bound(end, text));
    if (range.end <= range.first)
      return fail(fmt::format("layer range '{}' is empty", text), std::string(kRangeHint));
  }
  return range;
}

std::string to_string(const LayerRange& range) {
  return range.end < 0 ? fmt::format("{}:", range.first) : fmt::format("{}:{}", range.first, range.end);
}

Expected<CoshardOps> parse_coshard_ops(std::string_view text) {
  CoshardOps ops{.attention = false, .mlp = false};
  for (const std::string& part : split(text, ',')) {
    const std::string_view name = trim(part);
    if (name == "attention") ops.attention = true;
    else if (name == "mlp") ops.mlp = true;
    else
      return fail(fmt::format("unknown coshard op class '{}'", name), "use attention, mlp or attention,mlp");
  }
  if (!ops.attention && !ops.mlp) return fail("no coshard op class given", "use attention, mlp or attention,mlp");
  return ops;
}

std::string to_string(const CoshardOps& ops) {
  if (ops.attention && ops.mlp) return "attention,mlp";
  return ops.attention ? "attention" : "mlp";
}

CoshardConfig with_coshard_defaults(CoshardConfig config, int layers) {
  if (config.parts == 0) config.parts = kDefaultParts;
  if (!config.layers) config.layers = LayerRange{.first = 0, .end = std::max(1, layers / 4)};
  return config;
}

CoshardConfig applied_coshard(const plan::Plan& plan, std::string_view policy, const CoshardConfig& config) {
  if (policy != "coshard") return config;
  int layers = 0;
  for (int l : layer_ordinals(*plan.graph)) layers = std::max(layers, l + 1);
  return with_coshard_defaults(config, layers);
}

Expected<CoshardPlan> coshard_plan(const plan::Plan& plan, const CoshardConfig& config, int tp,
                                   const ir::OpCatalog& catalog) {
  const ir::Graph& graph = *plan.graph;
  CoshardPlan result{.parts = std::max(config.parts, 1), .regions = {}, .identifiers = {}, .tensor_dims = {}};
  result.identifiers.resize(graph.ops.size());
  result.tensor_dims.assign(graph.tensors.size(), -1);
  if (config.parts < 0) return fail(fmt::format("coshard {}: the parts per device must be at least 1", config.parts));
  if (result.parts == 1) return result;
  const std::vector<int> layer = layer_ordinals(graph);
  int layers = 0;
  for (int l : layer) layers = std::max(layers, l + 1);
  const LayerRange range = config.layers.value_or(LayerRange{});
  const int end = range.end < 0 ? layers : range.end;
  if (layers > 0 && (range.first >= layers || end > layers))
    return fail(fmt::format("coshard layers {}: '{}' has {} layers (0 to {})", to_string(range), graph.name, layers,
                            layers - 1),
                fmt::format("give a range inside 0:{}", layers));
  LOOM_ASSIGN_OR_RETURN(const TensorParallelLayout layout, tensor_parallel_regions(plan));
  for (std::vector<ir::OpId>& ops : connected_regions(graph, layout)) {
    // Regions outside the numbered layers (vocabulary-parallel heads and embeddings) stay as they are.
    const int l = layer[ops.front().index()];
    if (l < 0 || std::ranges::any_of(ops, [&](ir::OpId id) { return layer[id.index()] != l; })) continue;
    const bool attention = holds_attention(graph, ops, catalog);
    if (l < range.first || l >= end || !(attention ? config.ops.attention : config.ops.mlp)) continue;
    CoshardRegion region{.ops = std::move(ops), .sources = {}, .sinks = {}, .attention = attention, .layer = l};
    find_ends(graph, region);
    for (ir::OpId id : region.ops) {
      const std::string& x = layout.splits[id.index()]->identifier;
      LOOM_RETURN_IF_ERROR(check_divisible(plan, id, x, tp, result.parts));
      result.identifiers[id.index()] = x;
      record_tensor_dims(plan, id, x, result.tensor_dims);
    }
    result.regions.push_back(std::move(region));
  }
  if (result.regions.empty())
    return fail(fmt::format("coshard {}: '{}' has no tensor-parallel {} region in layers {} ({} numbered layers)",
                            result.parts, graph.name, to_string(config.ops), to_string(range), layers),
                "coshard splits Megatron's attention-head and MLP regions (column- to row-parallel linears) of "
                "numbered layers; use megatron without coshard for this model, or another layer range");
  return result;
}

}  // namespace loom::policy
