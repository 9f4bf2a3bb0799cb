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
#include "loom/plan/schedule.h"
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
    if (!ir::is_parameter_gradient(graph, out.tensor)) return true;
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

// The pipeline rank of each device holding pairs: stages hold whole layers in program order, so a device's
// rank is that of its first op among the first ops of all devices (pp distinct ones).
std::map<int, int> pipeline_ranks(const Plan& plan, const std::map<std::pair<int, int>, std::vector<Pair>>& pairs) {
  std::map<int, std::uint32_t> first_op;
  for (const auto& [key, device_pairs] : pairs) {
    const std::uint32_t op = plan.sub_op(device_pairs.front().parts[0]).op.value;
    const auto [it, fresh] = first_op.try_emplace(key.first, op);
    if (!fresh) it->second = std::min(it->second, op);
  }
  std::vector<std::uint32_t> firsts;
  for (const auto& [device, op] : first_op) firsts.push_back(op);
  std::ranges::sort(firsts);
  firsts.erase(std::unique(firsts.begin(), firsts.end()), firsts.end());
  std::map<int, int> rank;
  for (const auto& [device, op] : first_op)
    rank[device] = static_cast<int>(std::ranges::lower_bound(firsts, op) - firsts.begin());
  return rank;
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
  if (config.pp > 1 && (config.virtual_stages > 1 || (config.schedule != plan::ScheduleKind::one_f_one_b &&
                                                        config.schedule != plan::ScheduleKind::gpipe)))
    return fail(fmt::format("--overlap oases pipelines with the 1f1b or gpipe schedule, one model chunk per device "
                            "(here {}, {} chunks)",
                            plan::name(config.schedule), config.virtual_stages),
                "use --schedule 1f1b or gpipe without --interleave with --overlap oases");
  if (config.micro_batches < 1)
    return fail(fmt::format("micro_batches is {}; it must be at least 1", config.micro_batches));
  LOOM_RETURN_IF_ERROR(check_even_batch(plan, config));
  ParallelConfig sub_batched = config;
  sub_batched.micro_batches *= 2;
  sub_batched.overlap = Overlap::none;
  LOOM_RETURN_IF_ERROR(megatron(plan, sub_batched, catalog));
  // megatron()'s order edges schedule the 2m sub-batches as micro-batches of their own (its pipeline
  // template, its accumulation order); the schedule over the m pairs below replaces them.
  plan.orders.clear();
  const plan::Schedule schedule{.kind = config.pp > 1 ? config.schedule : plan::ScheduleKind::one_f_one_b};
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::vector<plan::Block>> blocks,
                        plan::schedule_blocks(schedule, config.pp, config.micro_batches));
  const auto pairs = pairs_of(plan, config.micro_batches);
  for (const auto& [device, rank] : pipeline_ranks(plan, pairs)) {
    SubOpId last;  // the end of the device's previous block
    for (const plan::Block& block : blocks[static_cast<std::size_t>(rank)]) {
      const auto it = pairs.find({device, block.micro_batch});
      if (it == pairs.end()) continue;
      const std::vector<SubOpId> order = interleaved(plan, it->second, block.part == plan::BlockPart::backward);
      if (order.empty()) continue;
      if (last.valid()) LOOM_RETURN_IF_ERROR(plan::order(plan, last, order.front()));
      for (std::size_t i = 0; i + 1 < order.size(); ++i)
        LOOM_RETURN_IF_ERROR(plan::order(plan, order[i], order[i + 1]));
      last = order.back();
    }
  }
  return {};
}

}  // namespace loom::policy
