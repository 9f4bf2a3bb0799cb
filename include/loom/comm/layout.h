// RVD layouts (SuperScaler §4): how a tensor lies on an ordered list of devices.
//
// R(r)V(v)D(d1..dn) on r·v·Πd devices: r replicas, each the sum of v value parts, each part cut into
// d_i even chunks along dimension i. Canonical device order (nnScaler's grid): the device list is a
// row-major grid of shape (r, v, d1, .., dn), R outermost and the last D dimension innermost, so
// position p = ((ri·v + vi)·d1 + c1)·d2 + c2 ... . "R(1)V(2)D(1,2)@0-3": device 0 holds value part 0 of
// chunk (0,0), device 1 part 0 of chunk (0,1), device 2 part 1 of chunk (0,0), device 3 part 1 of (0,1).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/cluster/cluster.h"
#include "loom/core/error.h"
#include "loom/ir/dtype.h"
#include "loom/ir/shape.h"

namespace loom::comm {

// What is being moved: the FullTensor's shape and element type.
struct TensorSpec {
  ir::Shape shape;
  ir::DType dtype = ir::DType::f32;
  std::int64_t bytes() const { return shape.numel() * ir::size_bytes(dtype); }
  bool operator==(const TensorSpec&) const = default;
};

// Grid axes: 0 is R, 1 is V, 2 + i is D's dimension i.
inline constexpr std::size_t kAxisR = 0;
inline constexpr std::size_t kAxisV = 1;
inline constexpr std::size_t axis_of_dim(std::size_t dim) { return 2 + dim; }

// A device's place in the grid: (replica, value part, chunk index per dimension), in axis order.
using GridCoord = std::vector<std::int64_t>;

struct Layout {
  std::int64_t r = 1;
  std::int64_t v = 1;
  std::vector<std::int64_t> d;  // chunks per tensor dimension; its size is the tensor's rank
  std::vector<int> devices;     // canonical order (above)

  std::vector<std::int64_t> grid() const;  // {r, v, d1, .., dn}
  std::int64_t size() const;               // r · v · Πd; unchecked, so only for validated layouts
  GridCoord coord_of(std::size_t position) const;
  std::size_t position_of(const GridCoord& coord) const;
  int device_at(const GridCoord& coord) const { return devices[position_of(coord)]; }
  bool operator==(const Layout&) const = default;
  auto operator<=>(const Layout&) const = default;
};

// Checks the layout alone: positive factors, r·v·Πd = device count (overflow-checked), distinct
// non-negative devices.
Expected<void> validate(const Layout& layout);
// Also checks it fits the tensor: D rank = tensor rank and each dimension divisible by its d_i.
Expected<void> validate(const Layout& layout, const TensorSpec& tensor);
// Also checks every device exists in the cluster.
Expected<void> validate(const Layout& layout, const TensorSpec& tensor, const cluster::Cluster& cluster);

// Bytes of the piece each device holds (one chunk of one value part).
std::int64_t bytes_per_device(const Layout& layout, const TensorSpec& tensor);

// Per dimension [begin, end) of chunk `coord` (a GridCoord; its R and V entries are ignored).
struct Box {
  std::vector<std::int64_t> begin, end;
  std::int64_t volume() const;
};
Box chunk_box(const Layout& layout, const ir::Shape& shape, const GridCoord& coord);

// The same placement written in one normal form: replica and value-part indices carry no meaning
// beyond "which devices sum together", so for each chunk the value groups are sorted and then
// ordered by their smallest device. Two layouts hold the same data on the same devices iff their
// canonical forms are equal.
Layout canonical(const Layout& layout);
bool same_placement(const Layout& a, const Layout& b);

// Devices of the layout sorted ascending.
std::vector<int> device_set(const Layout& layout);

// Text form: "R(1)V(2)D(1,4)@0-7", devices as ranges and lists ("@0,2,4,6", "@0-3,8-11").
Expected<Layout> parse_layout(std::string_view text);
std::string to_string(const Layout& layout);
std::string devices_to_string(const std::vector<int>& devices);

}  // namespace loom::comm
