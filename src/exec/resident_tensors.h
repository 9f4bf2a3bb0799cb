// Private to materialization: the tensors that live outside the sub-ops reading them (plan/residence.h).
// A persistent tensor (parameter, optimizer state) is loaded as its resident pieces when the step starts
// (what a device holds between steps). A read inside a resident piece of the reader's device is a local
// slice of it (and a scale, for a value part); any other read is gathered for the reading op from every
// device's resident pieces and freed after that op, as ZeRO-3 gathers a parameter for the forward and
// again for the backward: once per use, so that no gathered copy waits between uses (a device's k-th
// part of an op, its k-th micro-batch, gets gathering k; a recomputation gathers again rather than
// keeping the forward's copy until the backward). A final gradient with resident pieces is reduced
// into them as soon as its last producer has run, and its readers slice those; when its partial sums
// come in groups (gradient_groups.h: the micro-batches), group by group as each is complete, the groups'
// sums added up on the pieces (a running sum, gradient_accumulation.h), so no device keeps a micro-batch's
// whole partial gradient until the step (DeepSpeed's ZeRO-2 and -3 with gradient accumulation). When the
// optimizer steps have written a persistent tensor's updated version, the step is closed
// (step_closing.h).
#pragma once

#include <map>
#include <tuple>
#include <vector>

#include "gradient_accumulation.h"
#include "gradient_groups.h"
#include "layout_transition.h"
#include "loom/plan/residence.h"
#include "need_groups.h"
#include "program_builder.h"

namespace loom::exec::detail {

class ResidentTensors {
 public:
  // `written`: by tensor, the output buffers of the sub-ops emitted so far (kept up to date by the caller).
  ResidentTensors(const plan::Plan& plan, ProgramBuilder& builder, const SearchContext& search,
                  const std::vector<std::vector<BufferId>>& written, bool use_layout_search);

  // Whether reads of `tensor` go through need() below.
  bool holds(ir::TensorId tensor) const { return held_[tensor.index()] != 0; }

  // The buffer on `consumer`'s device holding `piece` of a held tensor; `rerun`: for the recomputation
  // of `consumer` (plan/recompute.h).
  Expected<BufferId> need(const plan::SubOp& consumer, const plan::SubTensor& piece, bool rerun = false);

  // Called after `s` is emitted: its partial sums of weight gradients are accumulated
  // (gradient_accumulation.h); its outputs' tensors whose producers have now all run get their resident
  // pieces (gradients) or close the step (updated versions of persistent tensors).
  Expected<void> produced(const plan::SubOp& s);

  // Producer buffers of a tensor, the micro-batches' partial sums replaced by their running sums.
  std::vector<BufferId> current(std::span<const BufferId> sources) const { return accumulator_.current(sources); }

 private:
  // The resident piece of `tensor` on `device` containing `piece`'s box, as a buffer; invalid when none.
  Expected<BufferId> resident_containing(int device, const plan::SubTensor& piece);
  BufferId loaded(std::size_t tensor, std::size_t index);  // the resident piece, loaded once
  // One gathering: which parts of an op it serves (those of one use, see above) and whether for reruns.
  using GatherKey = std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, bool>;  // (op, tensor, use, rerun)
  // Gathers every piece of `tensor` that the parts of `key`'s op and use (the recomputed ones, for a
  // rerun) read outside their device's resident pieces.
  Expected<void> gather_for(const GatherKey& key);
  Expected<std::vector<BufferId>> sources(ir::TensorId tensor);
  // Finds the groups of each final gradient with resident pieces (gradient_groups.h).
  void find_groups();
  // Reduces group `group` of `tensor`'s partial sums into its resident pieces and adds them to their sums.
  Expected<void> reduce_group(std::size_t tensor, std::int64_t group);
  // The whole resident piece `index` of a grouped tensor: its groups' sums added up.
  BufferId group_sum(std::size_t tensor, std::size_t index);

  const plan::Plan& plan_;
  ProgramBuilder& builder_;
  const SearchContext& search_;
  const std::vector<std::vector<BufferId>>& written_;
  bool use_layout_search_;
  GradientAccumulator accumulator_;
  std::vector<std::vector<plan::ResidentPiece>> pieces_;  // by tensor
  std::vector<std::vector<BufferId>> buffers_;            // by tensor, aligned with pieces_: loaded or reduced
  std::vector<char> held_;                                // by tensor
  std::vector<std::size_t> remaining_;                    // by tensor: producer outputs not yet emitted
  // A final gradient with resident pieces reduced in groups (gradient_groups.h).
  struct Groups {
    GradientGroups groups;                       // count 1: reduced once, when complete
    std::vector<std::size_t> remaining;          // by group: producer outputs not yet emitted
    std::vector<std::vector<BufferId>> reduced;  // by resident piece: each group's sum there
  };
  std::vector<Groups> groups_;  // by tensor
  NeedMap<BufferId> derived_;                             // slices and scales of resident pieces
  std::vector<std::uint32_t> use_;                        // by sub-op: earlier parts of its op on its device
  std::map<GatherKey, NeedMap<BufferId>> gathered_;
};

}  // namespace loom::exec::detail
