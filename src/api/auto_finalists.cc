#include "loom/api/auto_finalists.h"

#include <algorithm>
#include <cmath>
#include <map>


namespace loom::api {
namespace {

const search::Estimate& estimate(const RankedSpace& space, std::size_t i) { return *space.estimates[i]; }

// The ranked candidates the baselines choose among: per base configuration, the first recomputation
// priced to fit (else the last), in enumeration order; from auto's space only what the baselines' grids hold
// (`space_is_grid`: the space is a baseline's grid already).
std::vector<std::size_t> baseline_choices(const RankedSpace& space, search::Family family, bool space_is_grid) {
  std::map<std::string, std::size_t> chosen;
  for (std::size_t i = 0; i < space.candidates.size(); ++i) {
    const search::Candidate& c = space.candidates[i];
    if (c.family != family || !space.estimates[i] ||
        (!space_is_grid && !search::in_baseline_grids(c.config, space.gpus_per_node)))
      continue;
    const auto [it, fresh] = chosen.emplace(base_key(c), i);
    if (!fresh && !estimate(space, it->second).fits) it->second = i;
  }
  std::vector<std::size_t> out;
  for (std::size_t i : space.ranked)
    if (const auto it = chosen.find(base_key(space.candidates[i])); it != chosen.end() && it->second == i)
      out.push_back(i);
  return out;
}

// The first k plannable of `ranked`, one per base configuration (its other recomputations rank behind
// it when it fits, and would only repeat its plan more slowly).
std::vector<std::size_t> top_plannable(const RankedSpace& space, const std::vector<std::size_t>& ranked, int k) {
  std::vector<std::size_t> out;
  std::set<std::string> bases;
  for (std::size_t i : ranked)
    if (static_cast<int>(out.size()) < k && estimate(space, i).plannable &&
        bases.insert(base_key(space.candidates[i])).second)
      out.push_back(i);
  return out;
}

}  // namespace

std::string base_key(const search::Candidate& candidate) {
  search::Candidate base = candidate;
  base.config.recompute = policy::Recompute::none;
  return search::describe(base);
}

Finalists pick_finalists(const RankedSpace& space, bool baseline_rule) {
  Finalists out;
  std::vector<std::size_t>& picked = out.order;
  // A baseline's pick that auto picked too stays a baseline's pick: it is never dropped below.
  const auto add = [&](const std::vector<std::size_t>& some, bool follows) {
    for (std::size_t i : some) {
      if (std::ranges::find(picked, i) == picked.end()) picked.push_back(i);
      if (follows) out.follows_recompute.insert(i);
    }
  };
  for (search::Family family : {search::Family::megatron, search::Family::zero, search::Family::mixed}) {
    if (baseline_rule) {
      add(top_plannable(space, baseline_choices(space, family, true), kFinalistsPerFamily), true);
      continue;
    }
    std::vector<std::size_t> ranked;
    for (std::size_t i : space.ranked)
      if (space.candidates[i].family == family) ranked.push_back(i);
    add(top_plannable(space, ranked, kFinalistsPerFamily), false);
    // megatron-best's and deepspeed-best's own finalists, so that auto plans their winners too.
    if (family != search::Family::mixed)
      add(top_plannable(space, baseline_choices(space, family, false), kFinalistsPerFamily), true);
  }
  // auto's own picks that are slow to plan must promise more than the costing's error over the best cheap
  // pick (the baselines' picks stay: they are what auto is never slower than).
  double cheap_best = INFINITY;
  for (std::size_t i : picked)
    if (estimate(space, i).cheap && estimate(space, i).fits) cheap_best = std::min(cheap_best, estimate(space, i).step_seconds);
  std::erase_if(picked, [&](std::size_t i) {
    const search::Estimate& e = estimate(space, i);
    return !out.follows_recompute.contains(i) && !e.cheap && e.step_seconds > (1 - kExpensiveMargin) * cheap_best;
  });
  // Cheap plans first (a budget then keeps them), each group in rank order.
  std::vector<std::size_t> rank(space.candidates.size(), 0);
  for (std::size_t r = 0; r < space.ranked.size(); ++r) rank[space.ranked[r]] = r;
  std::ranges::stable_sort(picked, {}, [&](std::size_t i) { return std::pair(!estimate(space, i).cheap, rank[i]); });
  return out;
}

std::optional<std::size_t> early_finalist(const RankedSpace& space, const std::vector<std::size_t>& order) {
  const auto slow = std::ranges::find_if(order, [&](std::size_t i) { return !estimate(space, i).cheap; });
  if (slow == order.begin() || slow == order.end()) return std::nullopt;
  for (auto it = order.begin(); it != slow; ++it)
    if (!search::better(estimate(space, *slow), estimate(space, *it))) return std::nullopt;
  return *slow;
}

std::optional<std::size_t> next_recompute(const RankedSpace& space, std::size_t i) {
  const std::string key = base_key(space.candidates[i]);
  for (std::size_t j = i + 1; j < space.candidates.size() && base_key(space.candidates[j]) == key; ++j)
    if (space.estimates[j]) return j;
  return std::nullopt;
}

}  // namespace loom::api
