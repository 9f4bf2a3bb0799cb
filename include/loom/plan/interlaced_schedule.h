// nnScaler's interlaced pipeline order (Lin et al. 2024, §7, Fig. 6): a 1F1B pipeline whose devices also
// share, in turn, the work of the ops spread over all of them (the vocabulary-parallel embedding and LM
// head of T5 / mBART). Per micro-batch m there are three shared blocks, each run by every device:
//   E(m)  the embedding lookups' forward, before the first stage that reads them runs F(m);
//   H(m)  the head's forward and backward (with the loss), after the last stage's F(m) and before its B(m);
//   G(m)  the lookups' backward, after every stage that reads them has run B(m).
// The order is generated, not tabled: a unit-cost lockstep run of 1F1B (schedule_blocks) in which, at every
// other step boundary (in phase with the last stage's F), every device runs the shared blocks then ready
// (H and G as soon as their inputs are done, E before the F that needs it), in the same order on all
// devices, since each is a collective. The run is a witness that the order has no deadlock. In steady
// state each device runs one F and one B between two such barriers, and the shared blocks are work every
// device does at the same time (Fig. 6's right side); a barrier at every boundary would instead make each
// step as slow as the slowest block (a B) twice per micro-batch.
//
// That order is right only on unit costs. On real ones (F about a third of a B with recomputation, a
// head much cheaper than a stage) every shared block is a barrier of all devices that costs each of them
// the time until the last one arrives, and barriers at fixed steps undo 1F1B's stage offsets: t5-3.9b
// on 4 GPUs idled 3.4 s of a 6.9 s step against 1.8 s in 1F1B. search_interlaced orders the blocks on
// real costs instead (InterlacedCosts): barriers only at the H's, the E's before everything and the G's
// in the cool-down, and where each device joins a barrier chosen by a pilot search.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/plan/schedule.h"
#include "loom/plan/schedule_eval.h"

namespace loom::plan {

enum class SharedPart : std::uint8_t {
  none,             // a stage block (Block)
  embed_forward,    // E
  head,             // H: forward then backward
  embed_backward,   // G
};

struct InterlacedBlock {
  SharedPart shared = SharedPart::none;
  Block block;  // stage blocks: the 1F1B block; shared ones: the micro-batch only

  bool operator==(const InterlacedBlock&) const = default;
};
std::string to_string(const InterlacedBlock& block);  // "F0.2" (stage 0, micro-batch 2) / "E2" / "H2" / "G2"

// Per pipeline device (stage), its blocks in execution order. `embedding_readers`: the stages whose
// forward reads the lookups' outputs (T5: the encoder's first stage and the decoder's); the head reads
// the last stage's output. Errors: fewer than one stage or micro-batch, a reader outside [0, stages).
Expected<std::vector<std::vector<InterlacedBlock>>> interlaced_blocks(int stages, int micro_batches,
                                                                      std::span<const int> embedding_readers);

// Seconds one device spends on each block of one micro-batch: per stage its forward and its whole
// backward (with recomputation), and each shared block's part (every device runs 1 / devices of it).
struct InterlacedCosts {
  std::vector<double> forward, backward;  // by stage
  double embed_forward = 0, head = 0, embed_backward = 0;
};

// Errors: costs not one per stage, or a cost negative or not finite (naming `who`, the caller).
Expected<void> check_interlaced_costs(const InterlacedCosts& costs, int stages, std::string_view who);

// The schedule evaluator (schedule_eval.h) with blocks that every device runs together: each device
// runs its blocks in order; a stage block starts when its device is free and its inputs are done (F(s, m)
// after F(s - 1, m) and, on a reader, E(m); B(s, m) after F(s, m) and B(s + 1, m), the last stage's
// after H(m)); a shared block when it is next on every device, every device is free and its inputs are
// done (E: none; H(m): the last stage's F(m); G(m): every reader's B(m)), so each is a barrier.
// peak_held counts a stage's micro-batches from F to B (the shared blocks hold their activations only
// inside H, or one embedding per micro-batch). Errors: check_interlaced_costs', a device
// with stage blocks other than its own F and B of every micro-batch once, shared blocks missing, twice,
// or in another order than device 0's, and an order that deadlocks (naming where each device waits).
Expected<ScheduleEvaluation> evaluate_interlaced(const std::vector<std::vector<InterlacedBlock>>& devices,
                                                 int micro_batches, std::span<const int> embedding_readers,
                                                 const InterlacedCosts& costs);

struct InterlacedSearch {
  std::vector<std::vector<InterlacedBlock>> devices;  // per stage, its blocks in order
  ScheduleEvaluation evaluation;                      // evaluate_interlaced's numbers for them
  std::string order;      // the candidate chosen: "lockstep" (interlaced_blocks) or "1 H per barrier, ..."
  int group = 0;          // the chosen family member's H's per barrier and warm-up extra (0, 0: lockstep)
  int extra = 0;
  std::vector<int> caps;  // per stage, the most micro-batches it was allowed to hold
  std::int64_t rollouts = 0;  // greedy completions priced
};

// The order searched on `costs`: fewer barriers, placed where the devices lose least. Every E runs
// before anything (they need nothing and every device is free then) and every G after the last
// backward (the cool-down, where the devices wait anyway), so the only barriers are the H's, `group` of
// them at once. Each device runs 1F1B's stage blocks with a warm-up of min(cap_s, max(S - s + extra,
// group)) forwards (the last stage must run a group's F's before its H's; extra lets a device run ahead
// instead of waiting at a barrier), then backward / forward pairs, so device s never holds more than
// cap_s micro-batches. `most_held` gives the caps per stage (the policy derives them from the bytes a
// micro-batch holds and the headroom the stage has, policy/interlaced.h), each raised to 1F1B's own
// S - s and lowered to the micro-batches; empty, every cap is S, 1F1B's peak (stage 0's). A barrier
// is ready when the last stage's F of its last H ends; by default a device joins it after the block it
// is running then (or, the other rule, before a block that would end after it), and where each joins is
// a decision: a later threshold lets the devices whose blocks end before it run them first. The family
// (group 1..min(least cap, m), extra 0..most cap - 1, both rules) is completed greedily; the 4 cheapest
// are refined by a pilot search (at each barrier every threshold up to S + 1 block ends later and both
// rules, each completed greedily, the cheapest taken, so never worse than the greedy one), evaluated
// (evaluate_interlaced) beside interlaced_blocks' unit-cost order where that keeps within the caps, and
// the least makespan wins, then the least sum of idle time, then the unit-cost order. Deterministic. The
// roll-outs are bounded by a count that shrinks as (stages x micro-batches)^2 grows (about 1-2 s of work;
// S 8 and m 32 never reach it); past it the family stops growing and the barriers left take the default
// rule.
// Errors: what interlaced_blocks refuses, costs or caps not one per stage, or a cost negative or not
// finite.
Expected<InterlacedSearch> search_interlaced(int stages, int micro_batches, std::span<const int> embedding_readers,
                                             const InterlacedCosts& costs, std::span<const int> most_held = {});

}  // namespace loom::plan
