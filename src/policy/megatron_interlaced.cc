// The Composer's interlaced pipeline (megatron_composer.h, policy/interlaced.h): the shared ops spread
// over every device of a replica, and each device's stage blocks interleaved with the shared blocks.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <span>

#include "loom/plan/interlaced_schedule.h"
#include "loom/policy/stages.h"
#include "megatron_composer.h"

namespace loom::policy::detail {

using plan::SubOpId;
using plan::TransAlgo;

namespace {

// The blocks' seconds from config.op_seconds (api/stage_costs.h: each forward op's forward, backward and
// recomputation at the job's tp degree, on one device): per stage the sum of its staged ops, split F : B
// as 1 : 2 (1 : 3 with full recomputation, which runs the forward again before the backward); the shared
// ops' sums divided by pp, since each device runs 1 / (pp x tp) of them where op_seconds priced 1 / tp,
// the lookups' split E : G as 1 : 2. Only the ratios matter to the order. nullopt without op_seconds.
std::optional<plan::InterlacedCosts> block_costs(const ir::Graph& graph, const ParallelConfig& c,
                                                 const std::vector<int>& stage, const InterlacedLayout& layout) {
  if (c.op_seconds.size() != graph.ops.size()) return std::nullopt;
  std::vector<double> staged(static_cast<std::size_t>(c.pp), 0.0);
  double lookups = 0, head = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    const double seconds = c.op_seconds[op.id.index()];
    switch (layout.roles[op.id.index()]) {
      case SharedRole::embedding: lookups += seconds; break;
      case SharedRole::head: head += seconds; break;
      case SharedRole::none: staged[static_cast<std::size_t>(stage[op.id.index()])] += seconds; break;
    }
  }
  const double forward_share = c.recompute == Recompute::full ? 0.25 : 1.0 / 3;
  plan::InterlacedCosts costs{.embed_forward = lookups / 3 / c.pp,
                              .head = head / c.pp,
                              .embed_backward = 2 * lookups / 3 / c.pp};
  for (double seconds : staged) {
    costs.forward.push_back(seconds * forward_share);
    costs.backward.push_back(seconds * (1 - forward_share));
  }
  return costs;
}

// Per stage the most micro-batches it may hold by config.op_bytes (nullopt without them, or without one
// op's bytes): the stage's headroom over the bytes one micro-batch holds on it (its staged ops' held
// bytes; none: every micro-batch). The headroom is the device's memory less
//  - the stage's model state (its staged ops' state) and 1 / pp of the shared ops' (op_bytes priced each
//    op at 1 / tp, the shared ones run at 1 / (pp x tp));
//  - what the shared ops hold: every micro-batch's lookups (every E runs before anything) and one
//    micro-batch's head (its H runs forward and backward at once), 1 / pp of each.
//  - the transient of a backward block: the layer of the stage whose forward writes the most it does not
//    hold (op_bytes' working less held, summed over the layer's ops), written again by its recomputation
//    while its backward runs; none without working bytes.
// A headroom below one micro-batch gives 0 (the search keeps 1F1B's own holds). No margin is kept beyond
// that (the head's logits inside its H are not reserved): before the transient, the estimate had relied on
// over-counting the held activations (the next micro-batch's cross-attention keys and values, hoisted into
// the one-stage pricing plan's first forward until blocks ran whole), and without it the order chosen on
// nnScaler Fig. 8's 32-GPU cell peaked 1.2 GiB over the device. The simulator still checks the plan's memory.

std::optional<std::vector<int>> held_caps(const ir::Graph& graph, const ParallelConfig& c,
                                          const std::vector<int>& stage, const InterlacedLayout& layout) {
  const OpBytes& bytes = c.op_bytes;
  if (bytes.device <= 0 || bytes.held.size() != graph.ops.size() || bytes.state.size() != graph.ops.size())
    return std::nullopt;
  const auto pp = static_cast<std::size_t>(c.pp);
  std::vector<double> held(pp, 0.0), state(pp, 0.0);
  const bool has_working = bytes.working.size() == graph.ops.size();
  const std::vector<int> layer = layer_ordinals(graph);
  std::map<int, double> layer_transient;  // by layer ordinal: its forward's bytes written and not held
  double shared_state = 0, lookups = 0, head = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    const auto i = op.id.index();
    const auto h = static_cast<double>(bytes.held[i]), st = static_cast<double>(bytes.state[i]);
    switch (layout.roles[i]) {
      case SharedRole::embedding: lookups += h, shared_state += st; break;
      case SharedRole::head: head += h, shared_state += st; break;
      case SharedRole::none:
        held[static_cast<std::size_t>(stage[i])] += h;
        state[static_cast<std::size_t>(stage[i])] += st;
        if (has_working && layer[i] >= 0)
          layer_transient[layer[i]] += std::max(0.0, static_cast<double>(bytes.working[i]) - h);
        break;
    }
  }
  std::vector<double> transient(pp, 0.0);
  for (const ir::Op& op : graph.ops) {
    const auto i = op.id.index();
    if (op.pass == ir::Pass::forward && layout.roles[i] == SharedRole::none && layer[i] >= 0 && stage[i] >= 0) {
      double& t = transient[static_cast<std::size_t>(stage[i])];
      t = std::max(t, layer_transient[layer[i]]);
    }
  }
  const double device = static_cast<double>(bytes.device);
  const double shared = (shared_state + c.micro_batches * lookups + head) / c.pp;
  std::vector<int> caps;
  for (std::size_t s = 0; s < pp; ++s) {
    const double headroom = device - state[s] - shared - transient[s];
    const double admitted = held[s] > 0 ? std::floor(headroom / held[s]) : c.micro_batches;
    caps.push_back(static_cast<int>(std::clamp(admitted, 0.0, static_cast<double>(c.micro_batches))));
  }
  return caps;
}

// "interlaced order: H in groups of 4, warm-up +3, holding 7/6/5/4 micro-batches (memory caps 8/8/8/8)".
std::string order_note(const plan::InterlacedSearch& searched, bool by_memory) {
  const std::string held = fmt::format("{}", fmt::join(searched.evaluation.peak_held, "/"));
  const std::string caps = fmt::format("{} caps {}", by_memory ? "memory" : "count", fmt::join(searched.caps, "/"));
  if (searched.group == 0)
    return fmt::format("interlaced order: unit-cost lockstep, holding {} micro-batches ({})", held, caps);
  return fmt::format("interlaced order: H in groups of {}, warm-up +{}, holding {} micro-batches ({})",
                     searched.group, searched.extra, held, caps);
}

}  // namespace

Expected<void> Composer::place_shared(const ir::Op& op, const std::vector<SubOpId>& pieces) {
  const int ways = c_.tp * c_.pp;
  if (lookup_parts_.empty()) {
    const std::vector<std::vector<SubOpId>> per_device(static_cast<std::size_t>(c_.micro_batches));
    lookup_parts_.assign(static_cast<std::size_t>(device_count(c_)), per_device);
    head_parts_ = lookup_parts_;
  }
  auto& parts_of = role(op) == SharedRole::embedding ? lookup_parts_ : head_parts_;
  const auto& batch = batch_[op.id.index()];
  const TransAlgo data = batch ? TransAlgo{plan::SplitAlgo{*batch}} : TransAlgo{plan::ReplicateAlgo{}};
  const auto& vocabulary = interlaced_->splits[op.id.index()];
  const TransAlgo spread = vocabulary ? TransAlgo{*vocabulary}
                                      : TransAlgo{plan::ReplicateAlgo{.redundant_backward = true}};
  const std::string context = fmt::format("interlaced: spreading '{}' over pp x tp = {} devices", op.name, ways);
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> dp_parts, with_context(split(plan_, pieces[k], data, c_.dp), context));
    for (int r = 0; r < c_.dp; ++r) {
      LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> shared_parts,
                            with_context(split(plan_, dp_parts[static_cast<std::size_t>(r)], spread, ways), context));
      for (int i = 0; i < ways; ++i) {
        const SubOpId part = shared_parts[static_cast<std::size_t>(i)];
        LOOM_RETURN_IF_ERROR(plan::assign(plan_, part, shared_device(r, i)));
        parts_of[static_cast<std::size_t>(shared_device(r, i))][k].push_back(part);
      }
    }
  }
  return {};
}

Expected<void> Composer::schedule_interlaced() {
  // The stages reading the lookups' outputs (T5: the encoder's first and the decoder's first); the head
  // must read the last stage's output, since its block sits between that stage's F and B.
  std::set<int> readers;
  for (const ir::Op& op : graph_.ops) {
    if (op.pass != ir::Pass::forward) continue;
    for (ir::TensorId in : op.inputs) {
      const ir::OpId producer = producers_[in.index()];
      if (!producer.valid()) continue;
      const SharedRole from = role(graph_.op(producer));
      if (from == SharedRole::embedding && role(op) == SharedRole::none) readers.insert(stage_[op.id.index()]);
      if (from == SharedRole::none && role(op) == SharedRole::head && stage_[producer.index()] != c_.pp - 1)
        return fail(fmt::format("interlaced: head op '{}' reads '{}' of stage {}, not of the last stage {}", op.name,
                                graph_.tensor(in).name, stage_[producer.index()], c_.pp - 1),
                    "the head runs between the last stage's forward and backward; stage the model so the head's "
                    "input comes from its last layer");
    }
  }
  const std::vector<int> reader_list(readers.begin(), readers.end());
  // On the job's costs, the searched order; without them (op_seconds empty), the unit-cost one.
  std::vector<std::vector<plan::InterlacedBlock>> sequences;
  if (const std::optional<plan::InterlacedCosts> costs = block_costs(graph_, c_, stage_, *interlaced_)) {
    const std::optional<std::vector<int>> caps = held_caps(graph_, c_, stage_, *interlaced_);
    LOOM_ASSIGN_OR_RETURN(plan::InterlacedSearch searched,
                          plan::search_interlaced(c_.pp, c_.micro_batches, reader_list, *costs,
                                                  caps ? std::span<const int>(*caps) : std::span<const int>()));
    interlaced_order_ = order_note(searched, caps.has_value());
    sequences = std::move(searched.devices);
  } else {
    LOOM_ASSIGN_OR_RETURN(sequences, plan::interlaced_blocks(c_.pp, c_.micro_batches, reader_list));
  }
  BlockStarts starts(static_cast<std::size_t>(device_count(c_)));
  // Per device, each shared block's sub-ops and the last sub-op of the device's block before it (invalid
  // for the first), in the order every device lists them.
  std::vector<std::vector<std::pair<SubOpId, std::vector<SubOpId>>>> shared_blocks(
      static_cast<std::size_t>(device_count(c_)));
  for (int r = 0; r < c_.dp; ++r)
    for (int j = 0; j < c_.tp; ++j)
      for (int s = 0; s < c_.pp; ++s) {
        const auto d = static_cast<std::size_t>(device(s, r, j));
        SubOpId previous;
        for (const plan::InterlacedBlock& ib : sequences[static_cast<std::size_t>(s)]) {
          const auto m = static_cast<std::size_t>(ib.block.micro_batch);
          std::vector<SubOpId> current;
          switch (ib.shared) {
            case plan::SharedPart::embed_forward: current = lookup_parts_[d][m]; break;
            case plan::SharedPart::head:
              current = head_parts_[d][m];
              for (SubOpId b : plan::block_sub_ops(plan_, head_parts_[d][m], plan::BlockPart::backward))
                current.push_back(b);
              break;
            case plan::SharedPart::embed_backward:
              current = plan::block_sub_ops(plan_, lookup_parts_[d][m], plan::BlockPart::backward);
              break;
            case plan::SharedPart::none:
              current = plan::block_sub_ops(plan_, blocks_[block_slot(s, r, j)][m], ib.block.part);
              if (ib.block.part == plan::BlockPart::backward && previous.valid() && !current.empty())
                starts[d][{s, ib.block.micro_batch}] = previous;
              break;
          }
          if (current.empty()) continue;
          if (ib.shared != plan::SharedPart::none) shared_blocks[d].emplace_back(previous, current);
          if (previous.valid() && previous != current.front())
            LOOM_RETURN_IF_ERROR(with_context(plan::order(plan_, previous, current.front()),
                                              fmt::format("interlaced: device {} block {}", d, to_string(ib))));
          // Every sub-op of the block waits for the block before, not only its first: order completion runs
          // a device's ready sub-ops by program position, and would hoist what reads another input than the
          // block's first op (a decoder's cross-attention keys and values of the next micro-batch, reading
          // the encoder's output; a lookup's backward G, reading the embedding's gradient) into the block
          // being run, where the device then waits for that input: stalls the searched order does not have.
          if (previous.valid())
            for (SubOpId later : std::span(current).subspan(1))
              if (Expected<void> ordered = plan::order(plan_, previous, later); !ordered)
                return with_context(std::move(ordered), fmt::format("interlaced: device {} block {}", d, to_string(ib)));
          previous = current.back();
        }
      }
  LOOM_RETURN_IF_ERROR(order_shared_barriers(shared_blocks));
  return order_gradient_accumulations(starts);
}

// A shared block is a barrier of the replica's devices (its collectives span them all), and the order
// says so: every sub-op of the block on one device after the block before it on every other device.
// The devices' own programs do not change (each already runs the block after its own block before);
// what changes is where order completion's global order reaches the block: on every device at once, so
// a collective that materialization emits where the block's first reader runs (the head's input,
// gathered from the last stage to every device) sits at the block's start in every member's program,
// not inside a block another device was still running (nnScaler Fig. 8, t5-21b: the last stage waited
// 0.16 s inside its next forward for the other stages to reach the head's all-gather).
Expected<void> Composer::order_shared_barriers(
    const std::vector<std::vector<std::pair<SubOpId, std::vector<SubOpId>>>>& shared_blocks) {
  const int ways = c_.tp * c_.pp;
  for (int r = 0; r < c_.dp; ++r) {
    const auto& first = shared_blocks[static_cast<std::size_t>(shared_device(r, 0))];
    for (std::size_t k = 0; k < first.size(); ++k)
      for (int i = 0; i < ways; ++i) {
        const auto d = static_cast<std::size_t>(shared_device(r, i));
        if (shared_blocks[d].size() != first.size())
          return fail(fmt::format("interlaced: device {} runs {} shared blocks, device {} {}", d, shared_blocks[d].size(),
                                  shared_device(r, 0), first.size()),
                      "every device of a replica runs every shared block (a Loom defect)");
        for (int e = 0; e < ways; ++e) {
          const SubOpId before = shared_blocks[static_cast<std::size_t>(shared_device(r, e))][k].first;
          if (e == i || !before.valid()) continue;
          for (SubOpId x : shared_blocks[d][k].second) LOOM_RETURN_IF_ERROR(plan::order(plan_, before, x));
        }
      }
  }
  return {};
}

}  // namespace loom::policy::detail
