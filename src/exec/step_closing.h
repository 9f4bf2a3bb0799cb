// Private to materialization: step closing (plan/residence.h). Once the optimizer steps have written all
// of a persistent tensor's updated version, it is moved into the tensor's resident pieces (ZeRO-1/2's
// parameter all-gather; nothing where the steps write what the device holds), and every other buffer of
// the updated version is freed: each device ends the step holding exactly what the next step loads.
#pragma once

#include <span>

#include "layout_transition.h"
#include "loom/plan/residence.h"
#include "program_builder.h"

namespace loom::exec::detail {

// `written`: the optimizer steps' output buffers of `updated`; `residence`: the resident pieces of the
// tensor it updates (pieces of that tensor; the same boxes are wanted of `updated`).
Expected<void> close_step(ProgramBuilder& builder, const SearchContext& search, ir::TensorId updated,
                          std::span<const BufferId> written, std::span<const plan::ResidentPiece> residence,
                          bool use_layout_search);

}  // namespace loom::exec::detail
