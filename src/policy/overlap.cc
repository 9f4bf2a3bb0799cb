// Oases' sub-batches and their interleaving order (policy/overlap.h).
#include "loom/policy/overlap.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/plan/batch.h"
#include "loom/plan/primitives.h"
#include "loom/policy/policy.h"

namespace loom::policy {
namespace {

using plan::Plan;
using plan::SubOpId;

// Whether the sub-op writes partial sums that a collective adds up: an output that is a value part,
// other than a parameter's gradient (reduced once per step, by the gradient buckets).
bool writes_partial_sums(const Plan& plan, SubOpId id) {
  const ir::Graph& graph = *plan.graph;
  for (const plan::SubTensor& out : plan.sub_op(id).outputs) {
    if (out.value.is_whole()) continue;
    const ir::FullTensor& t = graph.tensor(out.tensor);
    const bool parameter_gradient =
        t.role == ir::TensorRole::gradient && t.owner.valid() && graph.tensor(t.owner).role == ir::TensorRole::parameter;
    if (!parameter_gradient) return true;
  }
  return false;
}

// The batch must split into dp x micro-batches x 2 equal parts; the error names the first op reading it.
Expected<void> check_even_batch(const Plan& plan, const ParallelConfig& config) {
  const ir::Graph& graph = *plan.graph;
  const std::int64_t parts = std::int64_t{config.dp} * config.micro_batches;
  for (ir::TensorId in : graph.inputs) {
    const ir::FullTensor& t = graph.tensor(in);
    if (t.shape.rank() == 0) continue;
    const std::int64_t batch = t.shape[0];
    if (batch % parts != 0 || (batch / parts) % 2 == 0) continue;  // megatron() reports the first case
    std::string reader = "?";
    for (const ir::Op& op : graph.ops)
      if (std::ranges::find(op.inputs, in) != op.inputs.end()) {
        reader = op.name;
        break;
      }
    return fail(fmt::format("--overlap oases: op '{}' reads a batch of {} per device and micro-batch (input '{}': {} "
                            "over dp {} x {} micro-batches), which 2 sub-batches cannot split",
                            reader, batch / parts, t.name, batch, config.dp, config.micro_batches),
                "use a global batch that gives every device an even batch per micro-batch");
  }
  return {};
}

// One op's two sub-batch parts on a device, and whether a collective follows each part (forward) or
// its backward part (backward).
struct Pair {
  SubOpId parts[2];
  bool communicates_forward = false;
  bool communicates_backward = false;
};

// Algorithm 1's order of one device's pairs: cut after each communication point into segments, the
// segments of sub-batch 0 and 1 alternating. `backward`: the parts' backward parts, in reverse.
std::vector<SubOpId> interleaved(const Plan& plan, const std::vector<Pair>& pairs, bool backward) {
  std::vector<const Pair*> sequence;
  for (const Pair& p : pairs)
    if (!backward || plan.sub_op(p.parts[0]).mirror.valid()) sequence.push_back(&p);
  if (backward) std::ranges::reverse(sequence);
  const auto part = [&](const Pair& p, int x) { return backward ? plan.sub_op(p.parts[x]).mirror : p.parts[x]; };
  std::vector<SubOpId> order;
  std::size_t begin = 0;
  for (std::size_t i = 0; i < sequence.size(); ++i) {
    const bool cut = backward ? sequence[i]->communicates_backward : sequence[i]->communicates_forward;
    if (!cut && i + 1 < sequence.size()) continue;
    for (int x = 0; x < 2; ++x)
      for (std::size_t j = begin; j <= i; ++j) order.push_back(part(*sequence[j], x));
    begin = i + 1;
  }
  return order;
}

// Per device, per micro-batch k: the pairs (micro-batches 2k and 2k + 1 of each op that sees the batch,
// in program order). A device holds 2 x micro_batches parts of such an op, in micro-batch order.
std::map<std::pair<int, int>, std::vector<Pair>> pairs_of(const Plan& plan, int micro_batches) {
  const std::vector<std::optional<std::string>> batch = plan::batch_identifiers(plan);
  std::map<std::pair<int, int>, std::vector<Pair>> pairs;
  for (const ir::Op& op : plan.graph->ops) {
    if (op.pass != ir::Pass::forward || !batch[op.id.index()]) continue;
    std::map<int, std::vector<SubOpId>> by_device;
    for (SubOpId part : plan.parts[op.id.index()]) by_device[plan.sub_op(part).device].push_back(part);
    for (const auto& [device, parts] : by_device) {
      if (parts.size() != static_cast<std::size_t>(2 * micro_batches)) continue;
      for (int k = 0; k < micro_batches; ++k) {
        Pair p{{parts[static_cast<std::size_t>(2 * k)], parts[static_cast<std::size_t>(2 * k + 1)]}};
        const SubOpId mirror = plan.sub_op(p.parts[0]).mirror;
        p.communicates_forward = writes_partial_sums(plan, p.parts[0]);
        p.communicates_backward = mirror.valid() && writes_partial_sums(plan, mirror);
        pairs[{device, k}].push_back(p);
      }
    }
  }
  return pairs;
}

}  // namespace

std::string_view name(Overlap overlap) {
  switch (overlap) {
    case Overlap::none: return "none";
    case Overlap::oases: return "oases";
  }
  return "?";
}

Expected<Overlap> parse_overlap(std::string_view text) {
  if (text == "none") return Overlap::none;
  if (text == "oases") return Overlap::oases;
  return fail(fmt::format("unknown overlap '{}'", text), "use none or oases");
}

Expected<void> oases_megatron(Plan& plan, const ParallelConfig& config, const ir::OpCatalog& catalog) {
  if (config.tp < 2)
    return fail(fmt::format("--overlap oases overlaps tensor parallelism's collectives, but tp is {}", config.tp),
                "set --tp 2 or more");
  if (config.pp > 1)
    return fail(fmt::format("--overlap oases does not combine with a pipeline yet (pp {})", config.pp),
                "use pp 1 with --overlap oases");
  if (config.micro_batches < 1)
    return fail(fmt::format("micro_batches is {}; it must be at least 1", config.micro_batches));
  LOOM_RETURN_IF_ERROR(check_even_batch(plan, config));
  ParallelConfig sub_batched = config;
  sub_batched.micro_batches *= 2;
  sub_batched.overlap = Overlap::none;
  LOOM_RETURN_IF_ERROR(megatron(plan, sub_batched, catalog));
  // With pp 1, megatron()'s only order edges run its micro-batches one after another (F0 B0 F1 B1 ...);
  // the sub-batches' chains below replace them.
  plan.orders.clear();
  std::map<int, SubOpId> last;  // by device: the end of its previous micro-batch's chains
  for (const auto& [key, pairs] : pairs_of(plan, config.micro_batches)) {
    const int device = key.first;
    for (bool backward : {false, true}) {
      const std::vector<SubOpId> order = interleaved(plan, pairs, backward);
      if (order.empty()) continue;
      if (const auto it = last.find(device); it != last.end())
        LOOM_RETURN_IF_ERROR(plan::order(plan, it->second, order.front()));
      for (std::size_t i = 0; i + 1 < order.size(); ++i) LOOM_RETURN_IF_ERROR(plan::order(plan, order[i], order[i + 1]));
      last[device] = order.back();
    }
  }
  return {};
}

}  // namespace loom::policy
