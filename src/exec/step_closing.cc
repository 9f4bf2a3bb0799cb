#include "step_closing.h"

#include <algorithm>

#include "move_pieces.h"

namespace loom::exec::detail {

Expected<void> close_step(ProgramBuilder& builder, const SearchContext& search, ir::TensorId updated,
                          std::span<const BufferId> written, std::span<const plan::ResidentPiece> residence,
                          bool use_layout_search) {
  std::vector<PlacedPiece> needs;
  for (const plan::ResidentPiece& r : residence) {
    plan::SubTensor piece = r.piece;
    piece.tensor = updated;
    needs.push_back({r.device, std::move(piece)});
  }
  const std::size_t first_new = builder.exec().buffers.size();
  LOOM_ASSIGN_OR_RETURN(const std::vector<BufferId> kept, move_pieces(builder, search, written, needs, use_layout_search));
  // Every other buffer of the updated version dies here: the optimizer's shards once gathered, the
  // pieces a fallback sent and combined.
  std::vector<BufferId> made(written.begin(), written.end());
  for (std::size_t b = first_new; b < builder.exec().buffers.size(); ++b)
    if (builder.exec().buffers[b].piece.tensor == updated) made.emplace_back(static_cast<std::uint32_t>(b));
  for (BufferId b : made)
    if (std::ranges::find(kept, b) == kept.end())
      builder.exec().programs[static_cast<std::size_t>(builder.device(b))].push_back(Free{b});
  return {};
}

}  // namespace loom::exec::detail
