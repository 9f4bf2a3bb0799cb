#include "loom/comm/p2p_fetch.h"

#include <algorithm>
#include <tuple>
#include <vector>

namespace loom::comm {
namespace {

// Source chunk coordinates (D part only) whose boxes intersect `box`.
std::vector<std::vector<std::int64_t>> overlapping_chunks(const Layout& from, const ir::Shape& shape, const Box& box) {
  std::vector<std::vector<std::int64_t>> out = {{}};
  for (std::size_t i = 0; i < from.d.size(); ++i) {
    const std::int64_t step = shape[i] / from.d[i];
    std::vector<std::vector<std::int64_t>> next;
    for (const auto& prefix : out)
      for (std::int64_t c = box.begin[i] / step; c <= (box.end[i] - 1) / step; ++c) {
        next.push_back(prefix);
        next.back().push_back(c);
      }
    out = std::move(next);
  }
  return out;
}

GridCoord with_rv(std::int64_t r, std::int64_t v, const std::vector<std::int64_t>& chunk) {
  GridCoord c = {r, v};
  c.insert(c.end(), chunk.begin(), chunk.end());
  return c;
}

Box intersect(Box a, const Box& b) {
  for (std::size_t i = 0; i < a.begin.size(); ++i) {
    a.begin[i] = std::max(a.begin[i], b.begin[i]);
    a.end[i] = std::min(a.end[i], b.end[i]);
  }
  return a;
}

}  // namespace

Step p2p_fetch(const Layout& from, const Layout& to, const TensorSpec& tensor, const cluster::Cluster& cluster,
               std::string rule) {
  Step step;
  step.rule = std::move(rule);
  step.primitive = Primitive::p2p;
  // Bytes by position in the layouts (each lists a device once): the sources' sent, the targets' received and
  // summed. By position rather than in maps by device: the search prices this edge at every state it expands,
  // ~4,000 transfers over 64 devices.
  std::vector<std::int64_t> sent(from.devices.size()), received(to.devices.size()), summed(to.devices.size());
  const std::int64_t element = ir::size_bytes(tensor.dtype);
  const bool blocks = from.v % to.v == 0;  // target part p sums a block of v_s / v_t source parts
  std::int64_t chunks = 1;                 // of the source, per value part and replica
  for (std::int64_t k : from.d) chunks *= k;
  // The source's position of replica rs, value part vs of the chunk at `chunk` (its index among the chunks).
  const auto source = [&](std::int64_t rs, std::int64_t vs, std::int64_t chunk) {
    return static_cast<std::size_t>((rs * from.v + vs) * chunks + chunk);
  };

  for (std::size_t p = 0; p < to.devices.size(); ++p) {
    const GridCoord leader = to.coord_of(p);
    if (leader[kAxisV] != 0) continue;  // handle each target value group once, from its part 0
    const std::vector<std::int64_t> target_chunk(leader.begin() + 2, leader.end());
    std::vector<std::size_t> group;  // the target value group's positions
    for (std::int64_t vt = 0; vt < to.v; ++vt) group.push_back(to.position_of(with_rv(leader[kAxisR], vt, target_chunk)));
    const auto in_group = [&](int dev) {
      return std::ranges::any_of(group, [&](std::size_t g) { return to.devices[g] == dev; });
    };
    const Box box = chunk_box(to, tensor.shape, leader);
    const int home = cluster.node_of(to.devices[group.front()]);

    for (const auto& source_chunk : overlapping_chunks(from, tensor.shape, box)) {
      std::int64_t chunk = 0;
      for (std::size_t i = 0; i < source_chunk.size(); ++i) chunk = chunk * from.d[i] + source_chunk[i];
      const std::int64_t bytes =
          intersect(box, chunk_box(from, tensor.shape, with_rv(0, 0, source_chunk))).volume() * element;
      // Pick the source replica: holds targets, then near the target, then least loaded, then lowest.
      std::tuple<int, int, std::int64_t, std::int64_t> best{1, 1, 0, -1};
      for (std::int64_t rs = 0; rs < from.r; ++rs) {
        int self = 0, near = 0;
        std::int64_t load = 0;
        for (std::int64_t vs = 0; vs < from.v; ++vs) {
          const std::size_t at = source(rs, vs, chunk);
          const int dev = from.devices[at];
          self += in_group(dev) ? 1 : 0;
          near += cluster.node_of(dev) == home ? 1 : 0;
          load = std::max(load, sent[at]);
        }
        const std::tuple<int, int, std::int64_t, std::int64_t> score{-self, -near, load, rs};
        if (std::get<3>(best) < 0 || score < best) best = score;
      }
      const std::int64_t rs = std::get<3>(best);
      for (std::int64_t vt = 0; vt < to.v; ++vt) {
        std::int64_t first = 0, last = 0;  // source parts [first, last) summed into target part vt
        if (blocks) {
          first = vt * (from.v / to.v);
          last = first + from.v / to.v;
        } else if (vt == 0) {
          last = from.v;
        }
        const std::size_t target = group[static_cast<std::size_t>(vt)];
        const int dst = to.devices[target];
        for (std::int64_t vs = first; vs < last; ++vs) {
          const std::size_t at = source(rs, vs, chunk);
          const int src = from.devices[at];
          if (src == dst || bytes == 0) continue;
          step.transfers.push_back({src, dst, bytes});
          sent[at] += bytes;
          received[target] += bytes;
          if (last - first > 1) summed[target] += bytes;
          step.buffer_bytes += bytes;
        }
      }
    }
  }
  for (std::int64_t bytes : received) step.bytes_per_device = std::max(step.bytes_per_device, bytes);
  for (std::int64_t bytes : summed) step.summed_bytes = std::max(step.summed_bytes, bytes);
  return step;
}

}  // namespace loom::comm
