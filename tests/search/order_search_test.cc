// The constraint order search (search/order_search.h) against exhaustive enumeration: on many random
// small requests (durations, dependencies, order constraints, memory) the Z3 optimum equals the best of
// all per-device orders, its order breaks nothing, and requests no order satisfies are refused naming
// the conflicting constraints.
#include "loom/search/order_search.h"

#include <algorithm>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "loom/core/strings.h"

namespace loom::search {
namespace {

// The least makespan over every per-device order without violations (nothing when none is valid).
std::optional<std::int64_t> brute_force(const OrderRequest& r) {
  std::vector<std::vector<int>> order(static_cast<std::size_t>(r.devices));
  for (std::size_t b = 0; b < r.blocks.size(); ++b) order[static_cast<std::size_t>(r.blocks[b].device)].push_back(static_cast<int>(b));
  std::optional<std::int64_t> best;
  // Odometer over the devices' permutations: each device's list starts sorted.
  const auto visit = [&](auto&& self, std::size_t d) -> void {
    if (d == order.size()) {
      const Expected<OrderEvaluation> e = evaluate_order(r, order);
      EXPECT_TRUE(e) << e.error().to_string();
      if (e && e->violations.empty() && (!best || e->makespan < *best)) best = e->makespan;
      return;
    }
    do self(self, d + 1);
    while (std::ranges::next_permutation(order[d]).found);
  };
  visit(visit, 0);
  return best;
}

// 2-3 devices, 3-7 blocks of 1-5 ticks, dependencies and constraints from lower to higher index (some
// constraints reversed: those may conflict), some blocks holding 1-2 units until a later block of their
// device, caps of 1-4 units.
OrderRequest random_request(std::mt19937& rng) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution(lo, hi)(rng); };
  OrderRequest r;
  r.devices = pick(2, 3);
  const int n = pick(3, 7);
  for (int b = 0; b < n; ++b) r.blocks.push_back({fmt::format("b{}", b), pick(0, r.devices - 1), pick(1, 5), 0, -1});
  for (int k = pick(0, n); k > 0; --k)
    if (const int a = pick(0, n - 1), b = pick(0, n - 1); a < b) r.dependencies.push_back({a, b});
  for (int k = pick(0, 3); k > 0; --k)
    if (const int a = pick(0, n - 1), b = pick(0, n - 1); a != b && (a < b || pick(0, 3) == 0))
      r.constraints.push_back({a, b, fmt::format("c{}", r.constraints.size())});
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      if (r.blocks[static_cast<std::size_t>(a)].device == r.blocks[static_cast<std::size_t>(b)].device &&
          r.blocks[static_cast<std::size_t>(a)].released_by < 0 && pick(0, 2) == 0)
        r.blocks[static_cast<std::size_t>(a)].holds = pick(1, 2), r.blocks[static_cast<std::size_t>(a)].released_by = b;
  if (pick(0, 1) == 0)
    for (int d = 0; d < r.devices; ++d) r.memory_caps.push_back(pick(1, 4));
  return r;
}

TEST(SolveOrder, EqualsExhaustiveEnumerationOnRandomSmallRequests) {
  std::mt19937 rng(15);
  int solved = 0, refused = 0, from_solver = 0;
  for (int i = 0; i < 300; ++i) {
    OrderRequest r = random_request(rng);
    const std::optional<std::int64_t> optimum = brute_force(r);
    for (bool greedy : {true, false}) {
      r.greedy_upper_bound = greedy;
      const std::string context = fmt::format("case {} greedy {}", i, greedy);
      const Expected<OrderSolution> found = solve_order(r);
      if (!optimum) {
        ASSERT_FALSE(found) << context;
        EXPECT_NE(found.error().message.find("no order satisfies these together"), std::string::npos)
            << context << ": " << found.error().to_string();
        ++refused;
        continue;
      }
      ASSERT_TRUE(found) << context << ": " << found.error().to_string();
      EXPECT_EQ(found->makespan, *optimum) << context;
      EXPECT_TRUE(found->proven_optimal) << context;
      EXPECT_LE(found->lower_bound, found->makespan) << context;
      const Expected<OrderEvaluation> e = evaluate_order(r, found->order);
      ASSERT_TRUE(e) << context << ": " << e.error().to_string();
      EXPECT_EQ(join(e->violations, "; "), "") << context;
      EXPECT_EQ(e->makespan, found->makespan) << context;
      EXPECT_EQ(e->start, found->start) << context;
      from_solver += found->from_solver;
      ++solved;
    }
  }
  // The cases cover both answers, and the solver (not only the greedy) found orders.
  EXPECT_GT(solved, 300);
  EXPECT_GT(refused, 10);
  EXPECT_GT(from_solver, 100);
}

TEST(SolveOrder, IsDeterministic) {
  std::mt19937 rng(7);
  for (int i = 0; i < 30; ++i) {
    const OrderRequest r = random_request(rng);
    const Expected<OrderSolution> a = solve_order(r), b = solve_order(r);
    ASSERT_EQ(a.has_value(), b.has_value());
    if (a) EXPECT_EQ(a->order, b->order) << i;
    else EXPECT_EQ(a.error(), b.error()) << i;
  }
}

// An initial order is the answer's upper bound; one that breaks a constraint is refused, named.
TEST(SolveOrder, StartsFromAValidInitialOrderAndRefusesABrokenOne) {
  std::mt19937 rng(21);
  int checked = 0;
  for (int i = 0; i < 100; ++i) {
    OrderRequest r = random_request(rng);
    r.greedy_upper_bound = false;
    const Expected<OrderSolution> plain = solve_order(r);
    if (!plain) continue;
    // The optimum's order is kept; reversed per device it is mostly invalid.
    r.initial_order = plain->order;
    const Expected<OrderSolution> from_it = solve_order(r);
    ASSERT_TRUE(from_it) << from_it.error().to_string();
    EXPECT_EQ(from_it->makespan, plain->makespan) << i;
    EXPECT_TRUE(from_it->proven_optimal) << i;
    for (auto& blocks : r.initial_order) std::ranges::reverse(blocks);
    const Expected<OrderEvaluation> e = evaluate_order(r, r.initial_order);
    ASSERT_TRUE(e) << e.error().to_string();
    const Expected<OrderSolution> broken = solve_order(r);
    ASSERT_EQ(broken.has_value(), e->violations.empty()) << i;
    if (!broken) {
      EXPECT_NE(broken.error().message.find("the initial order: order search: the order breaks"), std::string::npos)
          << broken.error().to_string();
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

// x, y on one device; z and w on another. The constraints x -> y, y -> z, z -> x form a cycle.
TEST(SolveOrder, NamesACycleOfOrderConstraints) {
  OrderRequest r;
  r.devices = 2;
  r.blocks = {{"x", 0, 1, 0, -1}, {"y", 0, 2, 0, -1}, {"z", 1, 1, 0, -1}, {"w", 1, 1, 0, -1}};
  r.constraints = {{0, 1, "x first"}, {3, 2, "w first"}, {1, 2, "y before z"}, {2, 0, "z before x"}};
  const Expected<OrderSolution> found = solve_order(r);
  ASSERT_FALSE(found);
  const std::string& message = found.error().message;
  EXPECT_NE(message.find("constraint 0 (x first: block 0 ('x') before block 1 ('y'))"), std::string::npos) << message;
  EXPECT_NE(message.find("constraint 2 (y before z"), std::string::npos) << message;
  EXPECT_NE(message.find("constraint 3 (z before x"), std::string::npos) << message;
  EXPECT_EQ(message.find("w first"), std::string::npos) << message;  // not part of the conflict
  EXPECT_EQ(found.error().hint, "drop or relax one of them");
}

TEST(SolveOrder, NamesAMemoryCapBelowOneBlocksNeed) {
  OrderRequest r;
  r.devices = 2;
  r.blocks = {{"f", 0, 1, 3, 1}, {"b", 0, 1, 0, -1}, {"g", 1, 1, 1, 3}, {"h", 1, 1, 0, -1}};
  r.memory_caps = {2, 1};
  const Expected<OrderSolution> found = solve_order(r);
  ASSERT_FALSE(found);
  EXPECT_NE(found.error().message.find("the memory cap of device 0 (2 units) while block 0 ('f') runs (holding 3)"),
            std::string::npos)
      << found.error().message;
  EXPECT_EQ(found.error().message.find("device 1"), std::string::npos) << found.error().message;
}

// Two orders on one device, the cap binding: a holds until b; c must wait until b has released a's units.
TEST(SolveOrder, KeepsMemoryWithinTheCapAtACost) {
  OrderRequest r;
  r.devices = 2;
  r.blocks = {{"a", 0, 1, 1, 1}, {"b", 0, 1, 0, -1}, {"c", 0, 1, 1, 3}, {"d", 0, 1, 0, -1}, {"e", 1, 4, 0, -1}};
  r.dependencies = {{0, 4}, {4, 1}};  // b waits for e (4 ticks on device 1)
  const Expected<OrderSolution> free = solve_order(r);
  ASSERT_TRUE(free) << free.error().to_string();
  EXPECT_EQ(free->makespan, 6);  // a, c, d, (wait), b
  r.memory_caps = {1, kNoMemoryCap};
  const Expected<OrderSolution> capped = solve_order(r);
  ASSERT_TRUE(capped) << capped.error().to_string();
  EXPECT_EQ(capped->makespan, 8);  // a, (wait for e), b, c, d; or c, d, a, (wait), b
  EXPECT_TRUE(capped->proven_optimal);
  const Expected<OrderEvaluation> e = evaluate_order(r, capped->order);
  ASSERT_TRUE(e) << e.error().to_string();
  EXPECT_EQ(e->peak_held[0], 1);
}

}  // namespace
}  // namespace loom::search
