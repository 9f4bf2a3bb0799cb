// Pipeline stages and schedule templates (DESIGN.md, "Primitives": pipeline schedules are order edges
// over (stage, micro-batch, pass) blocks), built from assign and order alone.
//
// A block is the forward sub-ops of one stage for one micro-batch (in program order), or their backward
// parts (in reverse), or, when backward ops are split (ir::split_weight_gradients), their input parts B
// and their weight parts W apart. Each device runs its blocks in the template's sequence; an order edge
// goes from the last sub-op of each block to the first sub-op of the next block of the same device.
// Inside a block, data dependencies keep the sub-ops together; a W block, whose parts depend on nothing
// of each other, is chained by order edges, so that none runs before its slot.
//
// Stages are numbered in program order. Without interleaving, stage s runs on pipeline device s. With
// Megatron's interleaved 1F1B (Narayanan et al. 2021, §2.2), p devices hold v model chunks each: stage
// c * p + s is chunk c of device s, so a micro-batch passes every device v times. ZB-V and DualPipeV put
// their 2 chunks in a V instead (pipeline_device).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "loom/plan/plan.h"

namespace loom::plan {

// Places every listed sub-op (and its backward part) on `device`.
Expected<void> stage(Plan& plan, std::span<const SubOpId> sub_ops, int device);

enum class ScheduleKind : std::uint8_t {
  gpipe,        // all forwards of a stage in micro-batch order, then all backwards
  one_f_one_b,  // nnScaler Table 4: (stages - i) forwards on stage i, then backward/forward pairs
  // Megatron-LM's interleaved 1F1B over `chunks` model chunks per device (its virtual pipeline; the
  // order of megatron/core/pipeline_parallel/schedules.py with micro-batch groups of p). The k-th
  // forward of a device runs chunk (k mod pv) / p on micro-batch (k / pv) p + k mod p; backwards walk
  // the chunks in reverse. Device s warms up with min(2 (p - s - 1) + (v - 1) p, v m) forwards, then
  // alternates forward and backward, then cools down. m must be a multiple of p.
  interleaved_one_f_one_b,
  // Zero-bubble schedules (Qi et al. 2023, "Zero Bubble Pipeline Parallelism") over backward ops split
  // into B and W; with uniform costs F = B = W (plan/schedule_eval.h):
  // ZB-H1: 1F1B's forwards and B parts (warm-up p - s), each W deferred to the first slot where the next
  // F or B is not ready, or would hold more than p micro-batches (1F1B's peak) on the device: the bubble
  // is (p - 1)(F + B - W), a third of 1F1B's (p - 1)(F + B + W). Placed by a unit-cost simulation.
  zb_h1,
  // ZB-H2: 2 (p - s) - 1 warm-up forwards and up to 2p - 1 micro-batches held, W's placed as in ZB-H1: no
  // bubble inside any device's span (first block to last) once m >= 2p, at a peak of 2p - 1.
  zb_h2,
  // ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): 2 chunks per device in a V,
  // chunk 0 of device s being stage s and chunk 1 stage 2p - 1 - s, so a micro-batch's forward goes down
  // the devices and back up, and its backward the reverse. At each step a device runs a ready B (chunk 0
  // first), else a ready F (chunk 1 first) while it holds fewer than 2p chunk activations (1F1B's peak),
  // else its oldest W (a unit-cost simulation, like ZB-H1's).
  zb_v,
  // DualPipeV (DeepSeek-V3's DualPipe cut to a V; deepseek-ai/DualPipe, dualpipev.py): ZB-V's placement,
  // device d running the reference's phases: 2 (p - d - 1) forwards of chunk 0; d + 1 pairs F0 F1;
  // p - d - 1 times B1 W F1; m - 2p + d + 1 times the pairs F0 B1, F1 B0 (each B with its W); p - d - 1
  // times B1, F1 B0; d + 1 times B1 B0, the second half deferring their W's; p - d - 1 times W B0
  // (deferred); the d + 1 W's owed. A pair is two blocks in turn: Loom does not fuse them (the reference
  // overlaps one's communication with the other's compute). Needs m >= 2p.
  dualpipe_v,
  // nnScaler's 3F1B (schedule_3f1b.h): chunks = the model's passes (AlphaFold2's recycles + 1), pass p
  // of device s being stage p * devices + s; forwards of every pass, backwards of the last, in Table 7's
  // order with a searched warm-up and cool-down.
  three_f_one_b,
};
// Whether the schedule orders W parts apart from B parts (its job splits the backward ops).
bool splits_backward(ScheduleKind kind);
// Whether the schedule runs 2 chunks per device in a V (zb_v, dualpipe_v).
bool v_shaped(ScheduleKind kind);
// Whether the schedule places its own model chunks (v_shaped, three_f_one_b): chunks above 1 do not
// make it interleaved 1F1B.
bool places_chunks(ScheduleKind kind);
// The pipeline device of `stage` out of `devices`: stage mod devices, or the V (v_shaped).
int pipeline_device(ScheduleKind kind, int stage, int devices);
// "gpipe", "1f1b", "interleaved 1f1b", "zb-h1", "zb-h2", "zb-v", "dualpipe-v", "3f1b"; parse_schedule_kind reads
// those a job names (interleaving is asked for by chunks, not by name).
std::string_view name(ScheduleKind kind);
Expected<ScheduleKind> parse_schedule_kind(std::string_view text);
// How apply_schedule ties a block to the block before it on the same device.
enum class BlockOrder : std::uint8_t {
  // Every sub-op of the block after the last sub-op of the block before: one block at a time, the program
  // Megatron-LM runs (the default).
  strict,
  // Only the block's first sub-op after the block before: order completion may start the block's sub-ops
  // that do not wait for its first inside the block before (a T5 or mBART decoder stage computes the next
  // micro-batch's cross-attention keys and values during the running forward). A Loom program, not
  // Megatron-LM's; it can fill the bubbles of unbalanced stages or delay the block it runs inside
  // (docs/schedules.md, "Block order").
  hoist,
};
std::string_view name(BlockOrder order);  // "strict", "hoist"
Expected<BlockOrder> parse_block_order(std::string_view text);

struct Schedule {
  ScheduleKind kind = ScheduleKind::gpipe;
  int chunks = 1;  // model chunks per device (Megatron's virtual pipeline size); above 1 only when interleaved
  BlockOrder block_order = BlockOrder::strict;
};

// forward: F; backward: B, the input part, or the whole backward when the op is not split; weight: W.
enum class BlockPart : std::uint8_t { forward, backward, weight };

struct Block {
  int stage = 0;  // the stage (chunk * devices + device when interleaved)
  int micro_batch = 0;
  BlockPart part = BlockPart::forward;

  bool operator==(const Block&) const = default;
};
std::string to_string(const Block& block);  // "F2" / "B0" / "W1"
char part_letter(BlockPart part);           // 'F' / 'B' / 'W'

// The template: per pipeline device, its blocks in execution order. Every stage runs each (micro-batch,
// pass) once. Errors: fewer than one device, micro-batch or chunk; chunks above 1 without interleaving,
// or other than 2 for a V; 3F1B with fewer than 2 passes (chunks); DualPipeV with fewer than 2
// micro-batches per device;
// an interleaved template whose micro-batches (above 1) are not a multiple of the devices. One
// micro-batch through an interleaved pipeline passes the chunks in order and back.
Expected<std::vector<std::vector<Block>>> schedule_blocks(Schedule schedule, int num_devices, int num_micro_batches);

// stages[s][m]: the forward sub-ops of stage s for micro-batch m, in program order (e.g.
// MicroBatches::micro_batch); stage s runs on pipeline_device(kind, s, stages / chunks). Adds the
// template's order edges and returns the template, per device. Errors: an empty or ragged stage list, a
// stage count the chunks do not divide, a sub-op that is not a live forward part, a stage spread over
// several devices, two stages of different pipeline devices on one device, the chunks of one pipeline
// device on different devices, and whatever schedule_blocks refuses. schedule.block_order says how each
// block follows the block before it on its device (every sub-op, or its first only).
Expected<std::vector<std::vector<Block>>> apply_schedule(Plan& plan, Schedule schedule,
                                                         const std::vector<std::vector<std::vector<SubOpId>>>& stages);

// The sub-ops of one block: the forward list, or the backward (weight) parts of its sub-ops in reverse
// order (forward sub-ops without such a part are left out).
std::vector<SubOpId> block_sub_ops(const Plan& plan, std::span<const SubOpId> forward, BlockPart part);

}  // namespace loom::plan
