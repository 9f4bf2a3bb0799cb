// The order request's checks and its independent evaluator (search/order_request.h): exact times, peak
// memory and the violations it names.
#include "loom/search/order_request.h"

#include <gtest/gtest.h>

#include "loom/core/strings.h"

namespace loom::search {
namespace {

// Two devices: a (2 ticks) and c (1) on device 0, b (3) on device 1; a -> b -> c. a holds 2 units until c.
OrderRequest chain() {
  OrderRequest r;
  r.devices = 2;
  r.blocks = {{"a", 0, 2, 2, 2}, {"b", 1, 3, 0, -1}, {"c", 0, 1, 0, -1}};
  r.dependencies = {{0, 1}, {1, 2}};
  return r;
}

TEST(CheckRequest, NamesTheBadBlockOrEdge) {
  const auto refused = [](OrderRequest r) {
    const Expected<void> e = check_request(r);
    return e ? std::string{} : e.error().message;
  };
  EXPECT_EQ(refused(chain()), "");
  OrderRequest r = chain();
  r.blocks[1].duration = 0;
  EXPECT_NE(refused(r).find("block 1 ('b') lasts 0 ticks"), std::string::npos) << refused(r);
  r = chain();
  r.blocks[0].released_by = 1;
  EXPECT_NE(refused(r).find("is released by block 1 ('b') on device 1"), std::string::npos) << refused(r);
  r = chain();
  r.dependencies.push_back({2, 0});
  EXPECT_NE(refused(r).find("form a cycle"), std::string::npos) << refused(r);
  r = chain();
  r.constraints.push_back({0, 3, "mine"});
  EXPECT_NE(refused(r).find("constraint 0 (mine) joins blocks 0 and 3"), std::string::npos) << refused(r);
  r = chain();
  r.memory_caps = {1};
  EXPECT_NE(refused(r).find("1 memory caps for 2 devices"), std::string::npos) << refused(r);
}

TEST(EvaluateOrder, TimesTheOrderAndCountsHeldMemory) {
  const Expected<OrderEvaluation> e = evaluate_order(chain(), {{0, 2}, {1}});
  ASSERT_TRUE(e) << e.error().to_string();
  EXPECT_EQ(e->start, (std::vector<std::int64_t>{0, 2, 5}));
  EXPECT_EQ(e->makespan, 6);
  EXPECT_EQ(e->peak_held, (std::vector<std::int64_t>{2, 0}));
  EXPECT_TRUE(e->violations.empty()) << join(e->violations, "; ");
}

TEST(EvaluateOrder, NamesBrokenConstraintsCapsAndDeadlocks) {
  // Device 0 runs x, y, z (1 tick each); x and y hold 1 unit each until z.
  OrderRequest r;
  r.devices = 1;
  r.blocks = {{"x", 0, 1, 1, 2}, {"y", 0, 1, 1, 2}, {"z", 0, 1, 0, -1}};
  r.constraints = {{1, 0, "y first"}};
  r.memory_caps = {1};
  const Expected<OrderEvaluation> e = evaluate_order(r, {{0, 1, 2}});
  ASSERT_TRUE(e) << e.error().to_string();
  const std::string all = join(e->violations, "; ");
  EXPECT_NE(all.find("constraint y first: block 0 ('x') runs before block 1 ('y')"), std::string::npos) << all;
  EXPECT_NE(all.find("device 0 holds 2 units while block 1 ('y') runs, over its cap of 1"), std::string::npos) << all;
  EXPECT_EQ(e->peak_held, (std::vector<std::int64_t>{2}));
  // z before x: z's release of x must end after x starts; x waits on nothing, but z (released after x) does.
  const Expected<OrderEvaluation> stuck = evaluate_order(r, {{2, 0, 1}});
  ASSERT_TRUE(stuck) << stuck.error().to_string();
  EXPECT_NE(join(stuck->violations, "; ").find("the order deadlocks (device 0 at block 2 ('z'))"), std::string::npos)
      << join(stuck->violations, "; ");
}

TEST(EvaluateOrder, RefusesAMalformedOrder) {
  const auto refused = [](std::vector<std::vector<int>> order) {
    const Expected<OrderEvaluation> e = evaluate_order(chain(), order);
    return e ? std::string{} : e.error().message;
  };
  EXPECT_NE(refused({{0, 2}}).find("1 device lists for 2 devices"), std::string::npos);
  EXPECT_NE(refused({{0}, {1}}).find("block 2 ('c') is not listed"), std::string::npos);
  EXPECT_NE(refused({{0, 2, 0}, {1}}).find("listed twice"), std::string::npos);
  EXPECT_NE(refused({{0}, {1, 2}}).find("listed on device 1, but runs on device 0"), std::string::npos);
}

}  // namespace
}  // namespace loom::search
