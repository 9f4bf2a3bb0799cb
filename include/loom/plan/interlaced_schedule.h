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
// On real costs (InterlacedCosts) evaluate_interlaced prices an order, each shared block a barrier.
#pragma once

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

// The schedule evaluator (schedule_eval.h) with blocks that every device runs together: each device
// runs its blocks in order; a stage block starts when its device is free and its inputs are done (F(s, m)
// after F(s - 1, m) and, on a reader, E(m); B(s, m) after F(s, m) and B(s + 1, m), the last stage's
// after H(m)); a shared block when it is next on every device, every device is free and its inputs are
// done (E: none; H(m): the last stage's F(m); G(m): every reader's B(m)), so each is a barrier.
// peak_held counts a stage's micro-batches from F to B (the shared blocks hold their activations only
// inside H, or one embedding per micro-batch). Errors: sequences or costs not one per stage, a device
// with stage blocks other than its own F and B of every micro-batch once, shared blocks missing, twice,
// or in another order than device 0's, and an order that deadlocks (naming where each device waits).
Expected<ScheduleEvaluation> evaluate_interlaced(const std::vector<std::vector<InterlacedBlock>>& devices,
                                                 int micro_batches, std::span<const int> embedding_readers,
                                                 const InterlacedCosts& costs);

}  // namespace loom::plan
