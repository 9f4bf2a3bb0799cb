// Finalist selection (api/auto_finalists.h) on hand-made and random priced spaces: no planning.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "loom/api/auto_finalists.h"

namespace loom::api {
namespace {

search::Candidate candidate(search::Family family, policy::ParallelConfig config) {
  return {.family = family, .policy = family == search::Family::zero ? "zero" : "megatron", .config = config};
}

search::Estimate priced(double seconds, bool cheap) {
  return {.step_seconds = seconds, .fits = true, .plannable = true, .cheap = cheap};
}

bool contains(const std::vector<std::size_t>& v, std::size_t i) { return std::ranges::find(v, i) != v.end(); }

// Regression (4b2295d): deepspeed-best's winner, slow to plan and priced no faster than a cheap megatron
// plan, is also auto's own first zero pick. It stays a baseline's pick, so auto plans it (and follows it
// with its next recomputation); before, auto's own pick shadowed it and the slow-to-plan rule dropped it
// (llama3-8b on 64 GPUs: deepspeed-best's ZeRO-1 6.736 s dropped, auto chose a 7.338 s megatron plan).
TEST(PickFinalists, KeepsABaselinesPickThatAutoPickedToo) {
  const std::vector<search::Candidate> candidates = {
      candidate(search::Family::megatron, {.dp = 4, .tp = 2, .micro_batches = 4}),
      candidate(search::Family::zero, {.dp = 8, .micro_batches = 4, .zero = 1}),
      candidate(search::Family::mixed, {.dp = 4, .tp = 2, .micro_batches = 4, .zero = 1}),
  };
  const std::vector<std::optional<search::Estimate>> estimates = {priced(1.0, true), priced(1.2, false),
                                                                  priced(1.2, false)};
  const Finalists picked = pick_finalists({candidates, estimates, {0, 1, 2}}, false);
  EXPECT_TRUE(contains(picked.order, 1)) << "deepspeed-best's pick dropped";
  EXPECT_TRUE(picked.follows_recompute.contains(1));
  // auto's own slow pick, no baseline's, is dropped: the rule the baseline's pick is exempt from.
  EXPECT_FALSE(contains(picked.order, 2));
  EXPECT_EQ(picked.order.front(), 0u);  // cheap first
}

// Random priced spaces (every family, recomputations, fits and cheapness mixed): each finalist is priced
// and plannable, none twice, the cheap before the slow (each in rank order), every baseline pick
// (follows_recompute) among them, and each family's best plannable candidate picked unless it is auto's
// own slow pick priced no faster than kExpensiveMargin under the best cheap finalist.
TEST(PickFinalists, RandomSpacesKeepTheRules) {
  const search::SpaceFacts facts{.gpus = 8, .gpus_per_node = 8, .global_batch = 32, .layers = 8,
                                 .sequence_parallel = [](int) { return true; }};
  const std::vector<search::Candidate> candidates = search::enumerate_space(facts);
  ASSERT_GT(candidates.size(), 50u);
  std::mt19937 rng(15);
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE(trial);
    std::vector<std::optional<search::Estimate>> estimates(candidates.size());
    std::uniform_real_distribution<double> seconds(1.0, 2.0);
    for (auto& e : estimates) {
      if (rng() % 10 == 0) continue;  // not priced
      e = search::Estimate{.step_seconds = seconds(rng), .fits = rng() % 4 != 0, .plannable = rng() % 8 != 0,
                           .cheap = rng() % 3 != 0};
      e->peak_bytes = static_cast<std::int64_t>(rng() % 1000);
    }
    RankedSpace space{candidates, estimates, {}};
    for (std::size_t i = 0; i < candidates.size(); ++i)
      if (estimates[i]) space.ranked.push_back(i);
    std::ranges::stable_sort(space.ranked, [&](std::size_t a, std::size_t b) { return search::better(*estimates[a], *estimates[b]); });
    for (bool baseline_rule : {false, true}) {
      const Finalists picked = pick_finalists(space, baseline_rule);
      ASSERT_FALSE(picked.order.empty());
      std::vector<std::size_t> sorted = picked.order;
      std::ranges::sort(sorted);
      EXPECT_EQ(std::ranges::adjacent_find(sorted), sorted.end());
      std::vector<std::size_t> position(candidates.size(), 0);
      for (std::size_t r = 0; r < space.ranked.size(); ++r) position[space.ranked[r]] = r;
      for (std::size_t k = 0; k < picked.order.size(); ++k) {
        const std::size_t i = picked.order[k];
        ASSERT_TRUE(estimates[i].has_value());
        EXPECT_TRUE(estimates[i]->plannable);
        if (k > 0) {
          const std::size_t before = picked.order[k - 1];
          EXPECT_LE(std::pair(!estimates[before]->cheap, position[before]), std::pair(!estimates[i]->cheap, position[i]));
        }
      }
      for (std::size_t i : picked.follows_recompute) EXPECT_TRUE(contains(picked.order, i));
      if (baseline_rule) continue;
      double cheap_best = INFINITY;
      for (std::size_t i : picked.order)
        if (estimates[i]->cheap && estimates[i]->fits) cheap_best = std::min(cheap_best, estimates[i]->step_seconds);
      for (search::Family family : {search::Family::megatron, search::Family::zero, search::Family::mixed}) {
        const auto best = std::ranges::find_if(space.ranked, [&](std::size_t i) {
          return candidates[i].family == family && estimates[i]->plannable;
        });
        if (best == space.ranked.end()) continue;
        const search::Estimate& e = *estimates[*best];
        const bool dropped = !e.cheap && e.step_seconds > (1 - kExpensiveMargin) * cheap_best &&
                             !picked.follows_recompute.contains(*best);
        EXPECT_EQ(contains(picked.order, *best), !dropped) << search::describe(candidates[*best]);
      }
    }
  }
}

// The next recomputation of a base configuration: the next priced candidate with the same base.
TEST(NextRecompute, FindsTheNextPricedRecomputationOfTheSameBase) {
  const std::vector<search::Candidate> candidates = {
      candidate(search::Family::megatron, {.dp = 8, .recompute = policy::Recompute::none}),
      candidate(search::Family::megatron, {.dp = 8, .recompute = policy::Recompute::selective}),
      candidate(search::Family::megatron, {.dp = 8, .recompute = policy::Recompute::full}),
      candidate(search::Family::megatron, {.dp = 4, .tp = 2}),
  };
  const std::vector<std::optional<search::Estimate>> estimates = {priced(1, true), std::nullopt, priced(1, true),
                                                                  priced(1, true)};
  const RankedSpace space{candidates, estimates, {0, 2, 3}};
  EXPECT_EQ(next_recompute(space, 0), 2u);  // the selective one is not priced
  EXPECT_EQ(next_recompute(space, 2), std::nullopt);
  EXPECT_EQ(next_recompute(space, 3), std::nullopt);
}

// The early finalist (planned on the second core beside the cheap ones queued before it): the first slow
// one, only where it is priced better than every finalist queued before it, and never the first in the queue.
TEST(EarlyFinalist, TheFirstSlowOnePricedBetterThanEveryoneAheadOfIt) {
  const std::vector<search::Candidate> candidates(5, candidate(search::Family::zero, {.dp = 8, .zero = 1}));
  std::vector<std::optional<search::Estimate>> estimates = {priced(1.2, true), priced(1.1, true), priced(1.0, false),
                                                            priced(0.9, false), priced(1.3, true)};
  const RankedSpace space{candidates, estimates, {3, 2, 1, 0, 4}};
  EXPECT_EQ(early_finalist(space, {0, 1, 2, 3}), 2u);  // the first slow, not the best-priced slow
  EXPECT_EQ(early_finalist(space, {1, 3}), 3u);
  EXPECT_EQ(early_finalist(space, {4, 0, 3, 2}), 3u);
  EXPECT_EQ(early_finalist(space, {3, 2}), std::nullopt);  // first in the queue: nothing to overlap with
  EXPECT_EQ(early_finalist(space, {0, 1, 4}), std::nullopt);  // none slow
  EXPECT_EQ(early_finalist(space, {}), std::nullopt);
  estimates[2]->step_seconds = 1.15;  // no better than the cheap 1.1 ahead of it: the bound might skip it
  EXPECT_EQ(early_finalist(space, {0, 1, 2, 3}), std::nullopt);
  EXPECT_EQ(early_finalist(space, {0, 2, 1}), 2u);
  estimates[2]->fits = false;  // faster, but priced not to fit: no better than one that fits
  estimates[2]->step_seconds = 0.5;
  EXPECT_EQ(early_finalist(space, {0, 2}), std::nullopt);
}

}  // namespace
}  // namespace loom::api
