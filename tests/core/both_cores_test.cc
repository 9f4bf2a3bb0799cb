#include "loom/core/both_cores.h"

#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace loom {
namespace {

// Random item counts (0, 1 and odd ones included): every item is worked exactly once, and the results
// are those of a serial loop, item by item.
TEST(ForEachOnBothCores, WorksEveryItemOnceWithTheSerialResults) {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE(trial);
    const std::size_t n = trial < 3 ? static_cast<std::size_t>(trial) : rng() % 300;
    const std::uint64_t seed = rng();
    const auto result = [&](std::size_t i) { return (seed ^ (i * 0x9E3779B97F4A7C15ULL)) % 1000003; };
    std::vector<std::uint64_t> out(n, 0);
    std::vector<std::atomic<int>> calls(n);
    for_each_on_both_cores(n, [&](std::size_t i) {
      calls[i].fetch_add(1);
      out[i] = result(i);
    });
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(calls[i].load(), 1) << "item " << i;
      EXPECT_EQ(out[i], result(i)) << "item " << i;
    }
  }
}

// Two or more items: the odd ones run on one second thread (the second core is used, not only allowed).
TEST(ForEachOnBothCores, RunsTheOddItemsOnASecondThread) {
  std::vector<std::thread::id> ran(4);
  for_each_on_both_cores(ran.size(), [&](std::size_t i) { ran[i] = std::this_thread::get_id(); });
  EXPECT_EQ(ran[0], std::this_thread::get_id());
  EXPECT_EQ(ran[2], std::this_thread::get_id());
  EXPECT_NE(ran[1], std::this_thread::get_id());
  EXPECT_EQ(ran[1], ran[3]);
}

}  // namespace
}  // namespace loom
