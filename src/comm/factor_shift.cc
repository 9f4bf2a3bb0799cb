#include "loom/comm/factor_shift.h"

#include <cassert>
#include <map>

namespace loom::comm {

FactorShift shift_factor(const Layout& before, std::size_t from_axis, std::size_t to_axis, std::int64_t k) {
  std::vector<std::int64_t> grid = before.grid();
  assert(from_axis != to_axis && k > 0 && grid[from_axis] % k == 0);
  FactorShift out;
  out.after = before;
  grid[from_axis] /= k;
  grid[to_axis] *= k;
  out.after.r = grid[kAxisR];
  out.after.v = grid[kAxisV];
  for (std::size_t i = 0; i < out.after.d.size(); ++i) out.after.d[i] = grid[axis_of_dim(i)];

  std::map<GridCoord, std::size_t> group_of;  // coordinate without the moving sub-index -> group
  for (std::size_t p = 0; p < before.devices.size(); ++p) {
    const GridCoord x = before.coord_of(p);
    GridCoord y = x;
    const std::int64_t sub = x[from_axis] % k;
    y[from_axis] = x[from_axis] / k;
    y[to_axis] = x[to_axis] * k + sub;
    out.after.devices[out.after.position_of(y)] = before.devices[p];

    GridCoord key = x;
    key[from_axis] = x[from_axis] / k;
    auto [it, inserted] = group_of.try_emplace(key, out.groups.size());
    if (inserted) out.groups.emplace_back(static_cast<std::size_t>(k), -1);
    out.groups[it->second][static_cast<std::size_t>(sub)] = before.devices[p];
  }
  return out;
}

}  // namespace loom::comm
