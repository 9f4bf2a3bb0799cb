#include "loom/comm/search.h"

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "loom/cluster/presets.h"
#include "loom/comm/intra_rules.h"
#include "loom/comm/superscaler_cases.h"

namespace loom::comm {
namespace {

Layout parse(std::string_view text) { return parse_layout(text).value(); }
const cluster::Cluster kCluster = cluster::make_cluster("v100x8x2").value();

TransitionPlan plan(const TensorSpec& tensor, std::string_view from, std::string_view to,
                    const cluster::Cluster& c = kCluster) {
  const AlphaBetaCostModel model(c);
  Expected<TransitionPlan> p = search_transition({tensor, parse(from), parse(to)}, c, model);
  EXPECT_TRUE(p.has_value()) << p.error().to_string();
  return p.value_or(TransitionPlan{});
}

std::vector<std::string> rules(const TransitionPlan& p) {
  std::vector<std::string> out;
  for (const PlannedStep& s : p.steps) out.push_back(s.step.rule);
  return out;
}

const TensorSpec kBig{ir::Shape{64 << 20}, ir::DType::f32};  // 256 MiB

TEST(SearchTransition, IntraGroupPicksTheTextbookCollective) {
  using V = std::vector<std::string>;
  EXPECT_EQ(rules(plan(kBig, "R(1)V(8)D(1)@0-7", "R(8)V(1)D(1)@0-7")), V{"V->R all-reduce"});
  EXPECT_EQ(rules(plan(kBig, "R(1)V(1)D(8)@0-7", "R(8)V(1)D(1)@0-7")), V{"D->R all-gather"});
  EXPECT_EQ(rules(plan(kBig, "R(1)V(8)D(1)@0-7", "R(1)V(1)D(8)@0-7")), V{"V->D reduce-scatter"});
  EXPECT_EQ(rules(plan(kBig, "R(8)V(1)D(1)@0-7", "R(1)V(1)D(8)@0-7")), V{"R->D local chunk"});
  const TensorSpec matrix{ir::Shape{4096, 4096}, ir::DType::f32};
  EXPECT_EQ(rules(plan(matrix, "R(1)V(1)D(8,1)@0-7", "R(1)V(1)D(1,8)@0-7")), V{"D->D all-to-all"});
  EXPECT_EQ(rules(plan(kBig, "R(1)V(1)D(8)@0-7", "R(1)V(1)D(8)@0-7")), V{});
}

TEST(SearchTransition, AllReduceTimeMatchesTheRingFormula) {
  const TransitionPlan p = plan(kBig, "R(1)V(8)D(1)@0-7", "R(8)V(1)D(1)@0-7");
  const double s = 256.0 * (1 << 20);
  EXPECT_DOUBLE_EQ(p.time, 8e-6 + 14 * 1e-6 + 2 * 7.0 / 8 * s / 150e9);
  EXPECT_EQ(p.bytes_per_tier.at(cluster::LinkKind::nvlink), 8 * (2 * 7 * (256LL << 20) / 8));
}

TEST(SearchTransition, Figure11NoSlowerThanThePapersPath) {
  // SuperScaler's path: all-reduce over value parts, then all-to-all. With two members, an exchange of
  // value parts by p2p moves the same bytes with one hop less, so the search may pick that instead.
  const TensorSpec t{ir::Shape{1024, 1024}, ir::DType::f32};
  const AlphaBetaCostModel model(kCluster);
  const Transition reduce = all_reduce_v_to_r(parse("R(1)V(2)D(1,2)@0-3"), t, 2).value();
  const Transition swap = all_to_all_d_to_d(reduce.after, t, 1, 0, 2).value();
  EXPECT_EQ(canonical(swap.after), canonical(parse("R(2)V(1)D(2,1)@0-3")));
  const double paper = model.step_time(reduce.step) + model.step_time(swap.step);
  const TransitionPlan p = plan(t, "R(1)V(2)D(1,2)@0-3", "R(2)V(1)D(2,1)@0-3");
  EXPECT_LE(p.time, paper);
}

TEST(SearchTransition, Figure18aReplicatedToReplicatedAcrossServers) {
  const TransitionPlan p = plan(kBig, "R(4)V(1)D(1)@0-3", "R(8)V(1)D(1)@8-15");
  EXPECT_EQ(rules(p), (std::vector<std::string>{"R->D local chunk", "RD-scatter", "D->R all-gather"}));
  EXPECT_EQ(p.bytes_per_tier.at(cluster::LinkKind::infiniband), 256LL << 20);  // the tensor crosses once
  EXPECT_GT(p.baseline_time / p.time, 5);
}

TEST(SearchTransition, Figure18bValuePartsToChunksAcrossServers) {
  const TransitionPlan p = plan(kBig, "R(1)V(4)D(1)@0-3", "R(1)V(1)D(8)@8-15");
  ASSERT_FALSE(p.steps.empty());
  EXPECT_EQ(p.steps.front().step.rule, "V->D reduce-scatter");
  EXPECT_EQ(p.bytes_per_tier.at(cluster::LinkKind::infiniband), 256LL << 20);
}

TEST(SearchTransition, Table3NeverWorseThanP2p) {
  const AlphaBetaCostModel model(kCluster);
  int faster = 0;
  for (const NamedRequest& c : superscaler_table3_cases(kBig)) {
    Expected<TransitionPlan> p = search_transition(c.request, kCluster, model);
    ASSERT_TRUE(p.has_value()) << c.name;
    EXPECT_LE(p->time, p->baseline_time) << c.name;
    EXPECT_EQ(p->steps.empty() ? canonical(c.request.producer) : p->steps.back().after, canonical(c.request.consumer))
        << c.name;
    faster += p->time < 0.99 * p->baseline_time ? 1 : 0;
  }
  EXPECT_GE(faster, 12);  // SuperScaler improves 12 of 18; D(8)->D(8) and the like cannot improve
}

TEST(SearchTransition, ErrorsNameTheBadLayout) {
  const AlphaBetaCostModel model(kCluster);
  const TensorSpec t{ir::Shape{1000}, ir::DType::f32};
  Expected<TransitionPlan> p = search_transition({t, parse("R(1)V(1)D(16)@0-15"), parse("R(1)V(1)D(8)@0-7")}, kCluster, model);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("producer: layout R(1)V(1)D(16)@0-15"), std::string::npos);
  p = search_transition({t, parse("R(1)V(1)D(8)@0-7"), parse("R(1)V(1)D(8)@16-23")}, kCluster, model);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("consumer"), std::string::npos);
}

TEST(SearchTransition, TensorOverTheElementLimitIsAnError) {
  // 2^64 elements wrapped to 0 bytes and a 0 us plan.
  const AlphaBetaCostModel model(kCluster);
  const TensorSpec huge{ir::Shape{4294967296, 4294967296}, ir::DType::f32};
  Expected<TransitionPlan> p =
      search_transition({huge, parse("R(1)V(1)D(1,1)@0"), parse("R(1)V(1)D(1,1)@1")}, kCluster, model);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("2^48"), std::string::npos) << p.error().message;
}

TEST(SearchTransition, OutOfBudgetAnswersTheBestPathFoundAndSaysSo) {
  const AlphaBetaCostModel model(kCluster);
  const TransitionRequest r{kBig, parse("R(4)V(1)D(1)@0-3"), parse("R(8)V(1)D(1)@8-15")};
  const TransitionPlan p = search_transition(r, kCluster, model, SearchOptions{.max_states = 2}).value();
  EXPECT_TRUE(p.stopped_early);
  EXPECT_LE(p.states_explored, 3);
  ASSERT_FALSE(p.steps.empty());
  EXPECT_EQ(p.steps.back().after, canonical(r.consumer));
  EXPECT_LE(p.time, p.baseline_time);
  // The default budget is ample for this case, and at least as good.
  const TransitionPlan full = search_transition(r, kCluster, model).value();
  EXPECT_FALSE(full.stopped_early);
  EXPECT_LE(full.time, p.time);
}

TEST(SearchTransition, LargeDeviceCountsFinishWithinTheDefaultBudget) {
  // 256 devices: far beyond the budget (this ran for minutes without one). A state here weighs 256, so
  // the default budget stops after about 80 of them, a few seconds.
  const cluster::Cluster dgx = cluster::make_cluster("dgx2x16").value();
  const AlphaBetaCostModel model(dgx);
  const TensorSpec t{ir::Shape{4096, 4096}, ir::DType::f32};
  const TransitionRequest r{t, parse("R(1)V(1)D(256,1)@0-255"), parse("R(256)V(1)D(1,1)@0-255")};
  const TransitionPlan p = search_transition(r, dgx, model).value();
  EXPECT_TRUE(p.stopped_early);
  EXPECT_LE(p.states_explored, SearchOptions{}.max_states / 256 + 1);
  // The start's own edges include the direct all-gather, so what it found beats plain p2p.
  ASSERT_FALSE(p.steps.empty());
  EXPECT_EQ(p.steps.back().after, canonical(r.consumer));
  EXPECT_LT(p.time, p.baseline_time);
  // A budget below one such state's weight stops right after expanding the start.
  EXPECT_EQ(search_transition(r, dgx, model, SearchOptions{.max_states = 200}).value().states_explored, 1);
}

// A small gradient summed over 64 devices of 8 nodes into ZeRO's node-major shards (llama3-8b's norm
// weights): within the materializer's budget (1,000 weighted states, 63 of 64 devices) the search
// finishes by sends after a reduce-scatter within pairs of nodes, a pattern that differs per node. Without
// the p2p edge (finish_by_p2p false) a state weighs one, and 2,000 of them reach the hierarchical plan of
// collectives alone, the same on every node and faster.
TEST(SearchTransition, CollectivesAloneReachTheHierarchicalPlanWhereP2pRanOutOfBudget) {
  const cluster::Cluster h100 = cluster::make_cluster("dgx-h100x8").value();
  const AlphaBetaCostModel model(h100);
  std::string node_major;
  for (int shard = 0; shard < 64; ++shard) node_major += (shard ? "," : "") + std::to_string(shard % 8 * 8 + shard / 8);
  const TransitionRequest r{TensorSpec{ir::Shape{4096}, ir::DType::bf16}, parse("R(1)V(64)D(1)@0-63"),
                            parse("R(1)V(1)D(64)@" + node_major)};
  const auto has_p2p = [](const TransitionPlan& p) {
    return std::ranges::any_of(p.steps, [](const PlannedStep& s) { return s.step.primitive == Primitive::p2p; });
  };
  const TransitionPlan truncated = search_transition(r, h100, model, SearchOptions{.max_states = 1'000}).value();
  EXPECT_TRUE(truncated.stopped_early);
  EXPECT_TRUE(has_p2p(truncated));
  const TransitionPlan alone =
      search_transition(r, h100, model, SearchOptions{.max_states = 2'000, .finish_by_p2p = false}).value();
  EXPECT_FALSE(alone.stopped_early);
  EXPECT_FALSE(has_p2p(alone));
  EXPECT_EQ(alone.steps.back().after, canonical(r.consumer));
  EXPECT_LT(alone.time, truncated.time);
  // Every collective's groups are either within one node or one rank of every node.
  for (const PlannedStep& s : alone.steps)
    for (const std::vector<int>& group : s.step.groups) {
      const bool one_node = std::ranges::all_of(group, [&](int d) { return h100.node_of(d) == h100.node_of(group.front()); });
      const bool one_rank = std::ranges::all_of(group, [&](int d) { return d % 8 == group.front() % 8; }) && group.size() == 8;
      EXPECT_TRUE(one_node || one_rank) << s.step.rule;
    }
  // Out of budget with nothing but collectives, it answers plain p2p (the baseline), never nothing.
  const TransitionPlan starved =
      search_transition(r, h100, model, SearchOptions{.max_states = 10, .finish_by_p2p = false}).value();
  EXPECT_TRUE(starved.stopped_early);
  ASSERT_EQ(starved.steps.size(), 1u);
  EXPECT_EQ(starved.steps.front().step.primitive, Primitive::p2p);
}

TEST(SearchTransition, ManyDevicesStillFindTheTextbookAllReduce) {
  // 64 devices: the budget runs out among cheap local layouts, but the direct V->R edge from the
  // producer is kept (the data-parallel gradient all-reduce of a 13B layer).
  const cluster::Cluster a100 = cluster::make_cluster("dgx-a100x8").value();
  const AlphaBetaCostModel model(a100);
  const TensorSpec t{ir::Shape{5140, 20560}, ir::DType::bf16};
  const TransitionRequest r{t, parse("R(1)V(64)D(1,1)@0-63"), parse("R(64)V(1)D(1,1)@0-63")};
  const TransitionPlan p = search_transition(r, a100, model).value();
  ASSERT_FALSE(p.steps.empty());
  EXPECT_EQ(p.steps.back().after, canonical(r.consumer));
  EXPECT_LT(p.time, p.baseline_time / 10);
}

TEST(TransitionCache, SecondLookupIsAHitWithTheSamePlan) {
  const AlphaBetaCostModel model(kCluster);
  TransitionCache cache;
  const TransitionRequest r{kBig, parse("R(1)V(8)D(1)@0-7"), parse("R(1)V(1)D(8)@8-15")};
  const TransitionPlan first = cache.find(r, kCluster, model).value();
  const TransitionPlan second = cache.find(r, kCluster, model).value();
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(first.time, second.time);
  EXPECT_EQ(rules(first), rules(second));
  EXPECT_FALSE(cache.find({kBig, parse("R(1)V(8)D(1)@0-7"), parse("R(1)V(1)D(8)@16-23")}, kCluster, model).has_value());
}

TEST(SharedTransitionCache, AnotherCachesMissIsAnsweredWithTheSamePlan) {
  const AlphaBetaCostModel model(kCluster);
  SharedTransitionCache shared;
  TransitionCache first(&shared), second(&shared), alone;
  const TransitionRequest r{kBig, parse("R(1)V(8)D(1)@0-7"), parse("R(1)V(1)D(8)@8-15")};
  const TransitionPlan searched = first.find(r, kCluster, model).value();
  EXPECT_EQ(shared.size(), 1u);
  const TransitionPlan answered = second.find(r, kCluster, model).value();
  EXPECT_EQ(shared.size(), 1u);  // not searched again
  EXPECT_EQ(second.size(), 1u);  // each cache still counts its own distinct transitions
  EXPECT_EQ(second.hits(), 0);
  const TransitionPlan own = alone.find(r, kCluster, model).value();
  for (const TransitionPlan* p : {&answered, &own}) {
    EXPECT_EQ(p->time, searched.time);
    EXPECT_EQ(rules(*p), rules(searched));
    EXPECT_EQ(p->steps.back().after, searched.steps.back().after);
  }
  // Another budget is another key.
  ASSERT_TRUE(second.find(r, kCluster, model, SearchOptions{.max_states = 100}).has_value());
  EXPECT_EQ(shared.size(), 2u);
}

TEST(SharedTransitionCache, ThreadsAskingTheSameTransitionsGetTheSerialPlans) {
  const AlphaBetaCostModel model(kCluster);
  std::vector<TransitionRequest> requests;
  for (int n : {2, 4, 8})
    requests.push_back({kBig, parse(fmt::format("R(1)V({})D(1)@0-{}", n, n - 1)),
                        parse(fmt::format("R(1)V(1)D({})@8-{}", n, 7 + n))});
  std::vector<TransitionPlan> serial;
  for (const TransitionRequest& r : requests) serial.push_back(search_transition(r, kCluster, model).value());
  SharedTransitionCache shared;
  std::vector<std::vector<TransitionPlan>> found(4);
  {
    std::vector<std::jthread> threads;
    for (std::size_t t = 0; t < found.size(); ++t)
      threads.emplace_back([&, t] {
        TransitionCache cache(&shared);
        for (std::size_t i = 0; i < requests.size(); ++i)
          found[t].push_back(cache.find(requests[(i + t) % requests.size()], kCluster, model).value());
      });
  }
  EXPECT_EQ(shared.size(), requests.size());
  for (std::size_t t = 0; t < found.size(); ++t)
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const TransitionPlan& want = serial[(i + t) % requests.size()];
      EXPECT_EQ(found[t][i].time, want.time);
      EXPECT_EQ(rules(found[t][i]), rules(want));
    }
}

TEST(SharedTransitionCache, StartsAgainEmptyPastItsCapacity) {
  const AlphaBetaCostModel model(kCluster);
  SharedTransitionCache shared(/*capacity=*/1);
  TransitionCache cache(&shared);
  ASSERT_TRUE(cache.find({kBig, parse("R(1)V(8)D(1)@0-7"), parse("R(1)V(1)D(8)@8-15")}, kCluster, model).has_value());
  ASSERT_TRUE(cache.find({kBig, parse("R(1)V(4)D(1)@0-3"), parse("R(1)V(1)D(4)@8-11")}, kCluster, model).has_value());
  EXPECT_EQ(shared.size(), 1u);
  EXPECT_EQ(cache.size(), 2u);
}

// Property: for random layouts on random small device sets, the path ends at the consumer layout and
// costs between 0 and plain p2p.
Layout random_layout(std::mt19937& rng, const ir::Shape& shape, const std::vector<int>& pool) {
  const int n_options[] = {1, 2, 4};
  const auto pick = [&](int hi) { return std::uniform_int_distribution<int>(0, hi)(rng); };
  Layout l;
  l.r = n_options[pick(2)];
  l.v = n_options[pick(2)];
  for (std::size_t i = 0; i < shape.rank(); ++i) l.d.push_back(n_options[pick(2)]);
  while (l.size() > static_cast<std::int64_t>(pool.size())) {  // shrink the largest factor
    std::int64_t* biggest = &l.r;
    if (l.v > *biggest) biggest = &l.v;
    for (auto& k : l.d)
      if (k > *biggest) biggest = &k;
    *biggest /= 2;
  }
  std::vector<int> devices = pool;
  std::shuffle(devices.begin(), devices.end(), rng);
  devices.resize(static_cast<std::size_t>(l.size()));
  l.devices = devices;
  return l;
}

TEST(SearchTransitionProperty, RandomLayoutsReachTheConsumerNoSlowerThanP2p) {
  std::mt19937 rng(7);
  for (const char* name : {"v100x8x2", "rtx3090-nvlinkx2"}) {
    const cluster::Cluster c = cluster::make_cluster(name).value();
    const AlphaBetaCostModel model(c);
    for (int trial = 0; trial < 60; ++trial) {
      const ir::Shape shape = trial % 2 == 0 ? ir::Shape{64} : ir::Shape{16, 8};
      std::vector<int> pool;
      for (int dev = 0; dev < c.device_count(); ++dev)
        if (std::uniform_int_distribution<int>(0, 1)(rng) == 1) pool.push_back(dev);
      if (pool.empty()) pool.push_back(0);
      const TransitionRequest r{{shape, ir::DType::f16}, random_layout(rng, shape, pool), random_layout(rng, shape, pool)};
      Expected<TransitionPlan> p = search_transition(r, c, model);
      ASSERT_TRUE(p.has_value()) << p.error().to_string();
      const Layout reached = p->steps.empty() ? canonical(r.producer) : p->steps.back().after;
      EXPECT_EQ(reached, canonical(r.consumer)) << to_string(r.producer) << " -> " << to_string(r.consumer);
      EXPECT_GE(p->time, 0);
      EXPECT_LE(p->time, p->baseline_time * (1 + 1e-12)) << to_string(r.producer) << " -> " << to_string(r.consumer);
    }
  }
}

}  // namespace
}  // namespace loom::comm
