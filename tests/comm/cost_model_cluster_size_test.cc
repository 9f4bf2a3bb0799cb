// Pricing a step must not depend on the cluster's size: a 4-GPU plan on a valid 65,536-node cluster file
// allocated per-node and per-device vectors on every evaluation (161 s for a plan). The bytes allocated
// while pricing are counted by replacing the global operator new in this test binary.
#include <atomic>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

#include "loom/cluster/presets.h"
#include "loom/comm/cost_model.h"

namespace {
std::atomic<std::size_t> allocated_bytes{0};
}  // namespace

void* operator new(std::size_t bytes) {
  allocated_bytes += bytes;
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
// The nothrow form too (std::stable_sort's temporary buffer), so that every allocation the replaced operator
// delete frees came from malloc: under AddressSanitizer an unreplaced form is its own operator new, which
// `free` may not release (alloc-dealloc-mismatch).
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  allocated_bytes += bytes;
  return std::malloc(bytes == 0 ? 1 : bytes);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace loom::comm {
namespace {

// Bytes allocated by one step_time call.
std::size_t bytes_to_price(const AlphaBetaCostModel& model, const Step& step, double* seconds) {
  const std::size_t before = allocated_bytes.load();
  *seconds = model.step_time(step);
  return allocated_bytes.load() - before;
}

TEST(AlphaBetaCostModel, PricingAStepAllocatesTheSameOnAHugeCluster) {
  const cluster::Cluster small = cluster::make_cluster("dgx-a100x2").value();
  const cluster::Cluster huge = cluster::make_cluster("dgx-a100x65536").value();
  ASSERT_EQ(huge.nodes, 65536);
  const AlphaBetaCostModel small_model(small), huge_model(huge);
  const std::vector<Step> steps = {
      Step{"p2p", Primitive::p2p, {}, 3 << 20, 2 << 20, {{0, 8, 1 << 20}, {1, 9, 1 << 20}, {8, 0, 1 << 20}}, 0},
      Step{"all-reduce", Primitive::all_reduce, {{0, 1, 8, 9}}, 4 << 20, 6 << 20, {}, 0},
      Step{"all-to-all", Primitive::all_to_all, {{0, 8}, {1, 9}}, 4 << 20, 2 << 20, {}, 0},
  };
  for (const Step& step : steps) {
    double small_seconds = 0, huge_seconds = 0;
    const std::size_t small_bytes = bytes_to_price(small_model, step, &small_seconds);
    const std::size_t huge_bytes = bytes_to_price(huge_model, step, &huge_seconds);
    EXPECT_DOUBLE_EQ(small_seconds, huge_seconds) << step.rule;  // the same devices, the same links
    EXPECT_GT(small_seconds, 0) << step.rule;
    // Before: 65,536 nodes x 2 NIC counters (1 MiB) and, for p2p, 2 x 524,288 device counters (8 MiB).
    EXPECT_EQ(huge_bytes, small_bytes) << step.rule;
    EXPECT_LT(huge_bytes, std::size_t{64} << 10) << step.rule;
  }
}

}  // namespace
}  // namespace loom::comm
