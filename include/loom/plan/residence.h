// Residence (DESIGN.md, "Materialization"): which pieces of a tensor each device holds whole-valued
// outside the sub-ops that read it. Parameters and optimizer states persist from step to step: a device
// starts a step holding their resident pieces (loaded), every read is derived from those (a local slice,
// or collectives over other devices' pieces), and the step ends with the updated version
// ("<x>.updated") in the same pieces on the same devices (step closing), so the ExecPlan can loop.
// A parameter's final gradient may be given a residence too: it is then reduced into its resident
// pieces as soon as the backward pass completes it, and its unreduced partial sums are freed; with
// micro-batches, each micro-batch's partial sums as soon as they are complete, added up on the pieces.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/plan/plan.h"

namespace loom::plan {

enum class Residence : std::uint8_t {
  // The default. Parameters and optimizer states: each device holds what its sub-ops read (per device,
  // the pieces no other piece it reads contains). Gradients: nothing is held; each reader gets its
  // piece when it runs.
  consumers,
  // What the device's optimizer steps touch: of a parameter or optimizer state, the pieces they write of
  // its updated version; of a gradient, the pieces they read. ZeRO's partitioning (Rajbhandari et al.
  // 2020): a parameter held so is gathered for each op reading more of it (stage 3), a gradient
  // reduce-scattered as soon as it is complete (stage 2), micro-batch by micro-batch.
  optimizer_shards,
};

std::string_view name(Residence residence);  // "consumers", "optimizer shards"

// Parameters and optimizer states as the step reads them (not their updated versions), and buffers the step
// writes a new version of (batch norm's running statistics).
bool persists(const ir::Graph& graph, ir::TensorId tensor);

// The version of `tensor` its optimizer step writes ("<x>.updated"); invalid when none (frozen).
ir::TensorId updated_version(const ir::Graph& graph, ir::TensorId tensor);

// The final gradient of a parameter: the gradient its optimizer step reads. Invalid when none.
ir::TensorId final_gradient(const ir::Graph& graph, ir::TensorId parameter);

// Sets where `tensor` resides. Errors name the tensor: one that neither persists nor is the final
// gradient of a parameter, or optimizer_shards for a tensor no optimizer step updates or reads.
Expected<void> set_residence(Plan& plan, ir::TensorId tensor, Residence residence);

Residence residence_of(const Plan& plan, ir::TensorId tensor);

struct ResidentPiece {
  int device = 0;
  SubTensor piece;  // whole-valued

  bool operator==(const ResidentPiece&) const = default;
};

// The pieces of a persistent tensor, or of a final gradient, each device holds under its residence, by
// device and then by box (deterministic). Whole-valued; boxes of one device never contain one another.
// A final gradient under `consumers` has none; neither has any other tensor. Assumes an assigned plan.
std::vector<ResidentPiece> resident_pieces(const Plan& plan, ir::TensorId tensor);
// The same for every tensor at once (by TensorId), in one pass over the plan.
std::vector<std::vector<ResidentPiece>> all_resident_pieces(const Plan& plan);

}  // namespace loom::plan
