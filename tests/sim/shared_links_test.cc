// The simulator's shared links (simulator.h, "Shared links") on synthetic costs: a parameter's start (a
// ZeRO gather or a gradient bucket) and an activation's sum (a tensor-parallel all-reduce, started or
// blocking) in flight at once on one device split the link they both cross, each at half its speed while
// both run, as processor sharing does.
#include <gtest/gtest.h>

#include <random>

#include "two_stream_plans.h"
#include "loom/sim/simulator.h"

namespace loom::sim {
namespace {

using testing::gather_beside_sum;

constexpr double kMs = 1e-3;

// Computes of c, the gather g, the all-reduce a; the gather crosses `gather_links`, the sum `sum_links`.
Durations costs(double c, double g, double a, std::uint8_t gather_links, std::uint8_t sum_links) {
  return {.compute = [=](const plan::SubOp&, int) { return c; },
          .collective = [=](const exec::Collective& x, std::int64_t) {
            return x.kind == comm::Primitive::all_gather ? g : a;
          },
          .links = [=](const exec::Collective& x) {
            return x.kind == comm::Primitive::all_gather ? gather_links : sum_links;
          }};
}

struct Ends {
  double gather = 0, sum = 0;
};

Ends collective_ends(const SimResult& result) {
  Ends ends;
  for (const Event& e : result.events)
    if (e.device == 0 && e.kind == EventKind::collective)
      (e.name.find("all-gather") != std::string::npos ? ends.gather : ends.sum) = e.end;
  return ends;
}

// Processor sharing of one link by the gather [0, g) and the sum from c: while both run each moves at half
// its speed. The one that would finish first alone ends after twice its work in the overlap, the other
// after all the work the link had, g + a from 0. The same whether the sum is started or blocking.
TEST(SharedLinks, TwoStreamsOnOneLinkShareItExactly) {
  std::mt19937 rng(1428);
  std::uniform_real_distribution<double> compute(0.1, 3), gather(0.1, 10), sum(0.1, 5);
  int shared = 0;
  for (int i = 0; i < 200; ++i) {
    auto f = gather_beside_sum(/*blocking_sum=*/i % 2 == 1);
    const double c = compute(rng) * kMs, g = gather(rng) * kMs, a = sum(rng) * kMs;
    Ends want{g, c + a};
    if (c < g) {
      const bool sum_first = a <= g - c;  // the sum's work done before the gather's, both at half speed
      want = sum_first ? Ends{g + a, c + 2 * a} : Ends{2 * g - c, g + a};
      ++shared;
    }
    auto result = simulate(f->exec, costs(c, g, a, kNetworkLinks, kNetworkLinks | kNodeLinks));
    ASSERT_TRUE(result) << result.error().to_string();
    const Ends got = collective_ends(*result);
    EXPECT_NEAR(got.gather, want.gather, 1e-12) << "c " << c << " g " << g << " a " << a;
    EXPECT_NEAR(got.sum, want.sum, 1e-12) << "c " << c << " g " << g << " a " << a;
    // ones again after the sum's wait, the gather's wait, fc, loss.
    EXPECT_NEAR(result->step_time, std::max(want.sum + c, want.gather) + 2 * c, 1e-12);
    EXPECT_EQ(result->link_passes > 1, c < g);
  }
  EXPECT_GT(shared, 50);
}

// Collectives on links of different kinds (the sum inside a node, the gather over the NICs), or a
// Durations without the hook: each runs as if alone, in one pass.
TEST(SharedLinks, StartsOnOtherLinksOrWithoutTheHookRunAsAlone) {
  auto f = gather_beside_sum();
  const double c = 1 * kMs, g = 10 * kMs, a = 2 * kMs;
  Durations without = costs(c, g, a, 0, 0);
  without.links = nullptr;
  for (const Durations& d : {costs(c, g, a, kNetworkLinks, kNodeLinks), without}) {
    auto result = simulate(f->exec, d);
    ASSERT_TRUE(result) << result.error().to_string();
    const Ends got = collective_ends(*result);
    EXPECT_NEAR(got.gather, g, 1e-12);
    EXPECT_NEAR(got.sum, c + a, 1e-12);
    EXPECT_NEAR(result->step_time, g + 2 * c, 1e-12);
    EXPECT_EQ(result->link_passes, 1);
  }
  // The same costs on one link: the sum ends at c + 2a, the gather a later.
  auto shared = simulate(f->exec, costs(c, g, a, kNetworkLinks, kNetworkLinks));
  ASSERT_TRUE(shared) << shared.error().to_string();
  EXPECT_NEAR(collective_ends(*shared).sum, c + 2 * a, 1e-12);
  EXPECT_NEAR(shared->step_time, g + a + 2 * c, 1e-12);
}

}  // namespace
}  // namespace loom::sim
