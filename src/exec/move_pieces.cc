#include "move_pieces.h"

#include <algorithm>
#include <map>
#include <set>

#include "fetch.h"
#include "local_sums.h"
#include "loom/core/disjoint_sets.h"

namespace loom::exec::detail {
namespace {

// Whether layout_transition would take these pieces (both sides RVD over their bounding box).
bool transition_applies(std::span<const PlacedPiece> produced, std::span<const PlacedPiece> needs) {
  std::vector<PlacedPiece> all(produced.begin(), produced.end());
  all.insert(all.end(), needs.begin(), needs.end());
  const auto region = bounding_box(all);
  if (!region) return false;
  const auto to = layout_of(needs, *region);
  return layout_of(produced, *region) && to && to->v == 1;
}

// The sources less repeats of a piece on one device (equal values: the coshard parts of a row-parallel
// linear, policy/coshard.h, each write its bias's whole gradient), so each device's pieces can be summed
// and moved as a layout.
std::vector<BufferId> distinct_on_each_device(const ProgramBuilder& builder, std::span<const BufferId> sources) {
  std::vector<BufferId> kept;
  for (BufferId b : sources)
    if (std::ranges::none_of(kept, [&](BufferId k) {
          return builder.device(k) == builder.device(b) && plan::same_piece(builder.piece(k), builder.piece(b), true);
        }))
      kept.push_back(b);
  return kept;
}

}  // namespace

Expected<std::optional<std::vector<BufferId>>> move_group(ProgramBuilder& builder, const SearchContext& search,
                                                          std::span<const BufferId> all_sources,
                                                          std::span<const PlacedPiece> needs) {
  const std::vector<BufferId> sources = distinct_on_each_device(builder, all_sources);
  const auto sums = plan_local_sums(builder, sources);
  if (!sums) return layout_transition(builder, search, sources, needs);
  std::vector<PlacedPiece> summed;
  for (const LocalSum& s : *sums) summed.push_back({s.device, s.label});
  if (!transition_applies(summed, needs)) return std::optional<std::vector<BufferId>>{};
  std::vector<BufferId> local;
  for (const LocalSum& s : *sums) local.push_back(builder.combine(s.device, s.parts, s.label));
  return layout_transition(builder, search, local, needs);
}

Expected<std::vector<BufferId>> move_pieces(ProgramBuilder& builder, const SearchContext& search,
                                            std::span<const BufferId> sources, std::span<const PlacedPiece> needs,
                                            bool use_layout_search) {
  std::vector<BufferId> result(needs.size());
  std::vector<std::size_t> open;  // needs not held in place
  for (std::size_t n = 0; n < needs.size(); ++n) {
    for (BufferId b : sources)
      if (builder.device(b) == needs[n].device && plan::same_piece(builder.piece(b), needs[n].piece, true))
        result[n] = b;
    if (!result[n].valid()) open.push_back(n);
  }
  // The open needs (indices [0, open)) and the sources (after them), joined where boxes meet: each set is one group.
  DisjointSets sets(open.size() + sources.size());
  for (std::size_t i = 0; i < open.size(); ++i)
    for (std::size_t s = 0; s < sources.size(); ++s)
      if (plan::boxes_meet(needs[open[i]].piece, builder.piece(sources[s]))) sets.unite(i, open.size() + s);
  std::map<std::size_t, std::pair<std::vector<std::size_t>, std::vector<BufferId>>> groups;  // root -> needs, sources
  for (std::size_t i = 0; i < open.size(); ++i) groups[sets.find(i)].first.push_back(open[i]);
  for (std::size_t s = 0; s < sources.size(); ++s)
    if (auto it = groups.find(sets.find(open.size() + s)); it != groups.end()) it->second.second.push_back(sources[s]);
  // The groups' searches run at once (one per piece's box: ZeRO's gathers and reductions of each tp
  // piece), so their steps are priced together (concurrent_steps.h).
  const ConcurrentSteps::Scope at_once(builder.concurrent(), builder.concurrent().new_set());
  for (const auto& [r, group] : groups) {
    const auto& [members, group_sources] = group;
    std::vector<PlacedPiece> wanted;
    for (std::size_t n : members) wanted.push_back(needs[n]);
    if (group_sources.empty())
      return failf("nothing holds {} of '{}' for device {}", wanted.front().piece.to_string(),
                   builder.exec().plan->graph->tensor(wanted.front().piece.tensor).name, wanted.front().device);
    std::optional<std::vector<BufferId>> moved;
    if (use_layout_search) {
      LOOM_ASSIGN_OR_RETURN(moved, move_group(builder, search, group_sources, wanted));
    }
    for (std::size_t i = 0; i < members.size(); ++i)
      result[members[i]] = moved ? (*moved)[i] : fetch(builder, wanted[i].device, wanted[i].piece, group_sources, "fallback");
  }
  return result;
}

}  // namespace loom::exec::detail
