#include "loom/sim/memory_over_time.h"

#include <algorithm>
#include <cassert>

#include "loom/cost/memory_timeline.h"

namespace loom::sim {

std::vector<MemoryPoint> memory_over_time(const exec::ExecPlan& exec, const SimResult& sim, int device) {
  const std::vector<std::int64_t> held = cost::bytes_after_each_instruction(exec, device);
  const auto d = static_cast<std::size_t>(device);
  const int timed = d < sim.represented_by.size() ? sim.represented_by[d] : device;
  // The representative's program has this device's length (symmetry.h checks it); its events give the
  // starts by position.
  std::vector<double> start(held.size(), 0);
  const auto [first, last] = std::ranges::equal_range(sim.events, timed, {}, &Event::device);
  for (auto it = first; it != last; ++it)
    if (it->instruction >= 0 && static_cast<std::size_t>(it->instruction) < start.size())
      start[static_cast<std::size_t>(it->instruction)] = it->start;
  std::vector<MemoryPoint> series;
  series.reserve(held.size());
  double now = 0;
  for (std::size_t i = 0; i < held.size(); ++i) {
    now = std::max(now, start[i]);
    series.push_back({now, held[i]});
  }
  return series;
}

std::vector<MemoryPoint> downsample(const std::vector<MemoryPoint>& series, std::size_t max_points) {
  if (series.size() <= max_points || max_points < 4) return series;
  const std::size_t runs = max_points / 4;
  std::vector<MemoryPoint> out;
  out.reserve(4 * runs);
  for (std::size_t r = 0; r < runs; ++r) {
    const std::size_t from = series.size() * r / runs, to = series.size() * (r + 1) / runs;
    if (from >= to) continue;
    std::size_t low = from, high = from;
    for (std::size_t i = from; i < to; ++i) {
      if (series[i].bytes < series[low].bytes) low = i;
      if (series[i].bytes > series[high].bytes) high = i;
    }
    std::vector<std::size_t> keep = {from, std::min(low, high), std::max(low, high), to - 1};
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    for (std::size_t i : keep) out.push_back(series[i]);
  }
  return out;
}

}  // namespace loom::sim
