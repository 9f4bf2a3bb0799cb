#include "loom/comm/layout.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "loom/core/checked_math.h"

namespace loom::comm {

std::vector<std::int64_t> Layout::grid() const {
  std::vector<std::int64_t> g = {r, v};
  g.insert(g.end(), d.begin(), d.end());
  return g;
}

std::int64_t Layout::size() const {
  std::int64_t n = r * v;
  for (std::int64_t k : d) n *= k;
  return n;
}

// The grid is {r, v, d1, .., dn}; these two run in the layout search's inner loops (p2p_fetch pairs every
// target with its holders), so they walk the factors in place rather than build grid().
GridCoord Layout::coord_of(std::size_t position) const {
  GridCoord coord(2 + d.size());
  auto rest = static_cast<std::int64_t>(position);
  for (std::size_t axis = coord.size(); axis-- > 0;) {
    const std::int64_t factor = axis == 0 ? r : axis == 1 ? v : d[axis - 2];
    coord[axis] = rest % factor;
    rest /= factor;
  }
  return coord;
}

std::size_t Layout::position_of(const GridCoord& coord) const {
  std::int64_t p = coord[0] * v + coord[1];
  for (std::size_t i = 0; i < d.size(); ++i) p = p * d[i] + coord[2 + i];
  return static_cast<std::size_t>(p);
}

Expected<void> validate(const Layout& layout) {
  const std::string text = to_string(layout);
  const auto listed = static_cast<std::int64_t>(layout.devices.size());
  const std::vector<std::int64_t> grid = layout.grid();
  for (std::int64_t k : grid)
    if (k < 1) return fail(fmt::format("layout {}: every R, V and D factor must be at least 1", text));
  // Overflow-checked: a wrapped r·v·Πd could equal the device count and let a huge layout through.
  const std::optional<std::int64_t> product = checked_product(grid, std::numeric_limits<std::int64_t>::max());
  if (!product)
    return fail(fmt::format("layout {}: R·V·D overflows 64 bits, far more than the {} devices listed", text, listed),
                "list as many devices as the product of the factors");
  if (*product != listed)
    return fail(fmt::format("layout {}: R·V·D = {} but {} devices are listed", text, *product, listed),
                "list as many devices as the product of the factors");
  std::set<int> seen;
  for (int dev : layout.devices) {
    if (dev < 0) return fail(fmt::format("layout {}: negative device {}", text, dev));
    if (!seen.insert(dev).second)
      return fail(fmt::format("layout {}: device {} is listed twice", text, dev), "each device holds one piece");
  }
  return {};
}

Expected<void> validate(const Layout& layout, const TensorSpec& tensor) {
  LOOM_RETURN_IF_ERROR(validate(layout));
  const std::string text = to_string(layout);
  if (layout.d.size() != tensor.shape.rank())
    return fail(fmt::format("layout {}: D has {} factors but the tensor {} has rank {}", text, layout.d.size(),
                            tensor.shape.to_string(), tensor.shape.rank()),
                "give one D factor per tensor dimension");
  for (std::size_t i = 0; i < layout.d.size(); ++i)
    if (tensor.shape[i] % layout.d[i] != 0)
      return fail(fmt::format("layout {}: dimension {} of size {} is not divisible by D factor {}", text, i,
                              tensor.shape[i], layout.d[i]),
                  "D factors must divide the tensor's dimensions evenly");
  return {};
}

Expected<void> validate(const Layout& layout, const TensorSpec& tensor, const cluster::Cluster& cluster) {
  LOOM_RETURN_IF_ERROR(validate(layout, tensor));
  for (int dev : layout.devices)
    if (!cluster.contains(dev))
      return fail(fmt::format("layout {}: device {} is not in cluster '{}' ({} devices, 0-{})", to_string(layout), dev,
                              cluster.name, cluster.device_count(), cluster.device_count() - 1));
  return {};
}

std::int64_t bytes_per_device(const Layout& layout, const TensorSpec& tensor) {
  std::int64_t chunks = 1;
  for (std::int64_t k : layout.d) chunks *= k;
  return tensor.bytes() / chunks;
}

std::int64_t Box::volume() const {
  std::int64_t n = 1;
  for (std::size_t i = 0; i < begin.size(); ++i) n *= std::max<std::int64_t>(0, end[i] - begin[i]);
  return n;
}

Box chunk_box(const Layout& layout, const ir::Shape& shape, const GridCoord& coord) {
  Box box;
  for (std::size_t i = 0; i < layout.d.size(); ++i) {
    const std::int64_t step = shape[i] / layout.d[i];
    box.begin.push_back(coord[axis_of_dim(i)] * step);
    box.end.push_back((coord[axis_of_dim(i)] + 1) * step);
  }
  return box;
}

Layout canonical(const Layout& layout) {
  // chunk index -> its value groups (one per replica), each a list of v devices
  std::map<GridCoord, std::vector<std::vector<int>>> chunks;
  for (std::size_t p = 0; p < layout.devices.size(); ++p) {
    GridCoord c = layout.coord_of(p);
    const auto replica = static_cast<std::size_t>(c[kAxisR]);
    const GridCoord chunk(c.begin() + 2, c.end());
    auto& groups = chunks[chunk];
    if (groups.size() <= replica) groups.resize(replica + 1);
    groups[replica].push_back(layout.devices[p]);
  }
  Layout out = layout;
  for (auto& [chunk, groups] : chunks) {
    for (auto& g : groups) std::ranges::sort(g);
    std::ranges::sort(groups);
    for (std::size_t ri = 0; ri < groups.size(); ++ri)
      for (std::size_t vi = 0; vi < groups[ri].size(); ++vi) {
        GridCoord c = {static_cast<std::int64_t>(ri), static_cast<std::int64_t>(vi)};
        c.insert(c.end(), chunk.begin(), chunk.end());
        out.devices[out.position_of(c)] = groups[ri][vi];
      }
  }
  return out;
}

bool same_placement(const Layout& a, const Layout& b) { return canonical(a) == canonical(b); }

std::vector<int> device_set(const Layout& layout) {
  std::vector<int> s = layout.devices;
  std::ranges::sort(s);
  return s;
}

}  // namespace loom::comm
