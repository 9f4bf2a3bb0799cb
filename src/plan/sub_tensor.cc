#include "loom/plan/sub_tensor.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "loom/core/strings.h"

namespace loom::plan {

SubTensor SubTensor::whole(ir::TensorId tensor, const ir::Shape& shape) {
  SubTensor s;
  s.tensor = tensor;
  for (std::int64_t d : shape.dims) s.box.push_back(IndexRange::all(d));
  return s;
}

ir::Shape SubTensor::local_shape() const {
  ir::Shape shape;
  for (const IndexRange& r : box) shape.dims.push_back(r.size());
  return shape;
}

std::string SubTensor::to_string() const {
  std::vector<std::string> dims;
  for (const IndexRange& r : box) dims.push_back(r.to_string());
  std::string text = fmt::format("%{}[{}]", tensor.value, join(dims, ", "));
  if (!value.is_whole()) text += fmt::format(" ({})", value.to_string());
  return text;
}

SubTensor normalized(SubTensor piece) {
  for (IndexRange& r : piece.box) r = r.normalized();
  return piece;
}

bool same_piece(const SubTensor& a, const SubTensor& b, bool with_value) {
  if (a.tensor != b.tensor || a.box.size() != b.box.size() || (with_value && a.value != b.value)) return false;
  for (std::size_t d = 0; d < a.box.size(); ++d)
    if (a.box[d] != b.box[d] && a.box[d].normalized() != b.box[d].normalized()) return false;
  return true;
}

std::uint64_t piece_hash(const SubTensor& piece, bool with_value) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the normalized ranges
  const auto mix = [&](std::int64_t v) { h = (h ^ static_cast<std::uint64_t>(v)) * 0x100000001b3ull; };
  mix(piece.tensor.value);
  for (const IndexRange& range : piece.box) {
    const IndexRange r = range.normalized();
    mix(r.start);
    mix(r.stop);
    mix(r.step);
  }
  if (with_value) {
    mix(piece.value.index);
    mix(piece.value.count);
  }
  return h;
}

bool boxes_meet(const SubTensor& a, const SubTensor& b) {
  if (a.tensor != b.tensor || a.box.size() != b.box.size()) return false;
  for (std::size_t d = 0; d < a.box.size(); ++d)
    if (intersect(a.box[d], b.box[d]).empty()) return false;
  return true;
}

std::optional<std::vector<IndexRange>> box_intersection(const SubTensor& a, const SubTensor& b) {
  if (a.tensor != b.tensor || a.box.size() != b.box.size()) return std::nullopt;
  std::vector<IndexRange> box;
  for (std::size_t d = 0; d < a.box.size(); ++d) {
    IndexRange r = intersect(a.box[d], b.box[d]);
    if (r.empty()) return std::nullopt;
    box.push_back(r);
  }
  return box;
}

bool overlaps(const SubTensor& a, const SubTensor& b) {
  return value_overlaps(a.value, b.value) && boxes_meet(a, b);
}

bool contains(const SubTensor& outer, const SubTensor& inner) {
  if (outer.tensor != inner.tensor || outer.box.size() != inner.box.size()) return false;
  if (!value_contains(outer.value, inner.value)) return false;
  for (std::size_t d = 0; d < outer.box.size(); ++d)
    if (!plan::contains(outer.box[d], inner.box[d])) return false;
  return true;
}

// Exact rational comparisons; __extension__ keeps -Wpedantic quiet.
__extension__ typedef __int128 Int128;

namespace {

// The consumer's indices along one dimension, cut into cells whose membership in every producer's
// range is the same: segments between the producers' bounds, times residues modulo the lcm of steps.
std::vector<IndexRange> cells_along(const IndexRange& consumer, std::span<const SubTensor> producers, std::size_t dim) {
  std::int64_t period = consumer.step;
  std::vector<std::int64_t> bounds = {consumer.start, consumer.stop};
  for (const SubTensor& p : producers) {
    const IndexRange& r = p.box[dim];
    period = std::lcm(period, r.step);
    for (std::int64_t b : {r.start, r.stop})
      if (b > consumer.start && b < consumer.stop) bounds.push_back(b);
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  std::vector<IndexRange> cells;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    const IndexRange segment{bounds[s], bounds[s + 1], 1};
    const IndexRange in_consumer = intersect(consumer, segment);
    if (in_consumer.empty()) continue;
    // Residues of the consumer's own progression modulo the period.
    const std::int64_t phases = period / consumer.step;
    for (std::int64_t k = 0; k < phases; ++k) {
      const IndexRange cell = intersect(in_consumer, IndexRange{consumer.start + k * consumer.step, segment.stop, period});
      if (!cell.empty()) cells.push_back(cell);
    }
  }
  return cells;
}

// Can a disjoint subfamily of the intervals tile [0, 1)? Sweep reachable left ends from 0.
bool tiles_unit_interval(std::vector<ValuePart> parts) {
  std::sort(parts.begin(), parts.end(), [](ValuePart a, ValuePart b) {
    return static_cast<Int128>(a.index) * b.count < static_cast<Int128>(b.index) * a.count;
  });
  // reachable: fractions p/q reached so far; start from 0/1.
  std::vector<ValuePart> reachable = {{0, 1}};  // stored as left ends "index/count"
  const auto same_point = [](std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
    return static_cast<Int128>(a) * d == static_cast<Int128>(c) * b;
  };
  for (const ValuePart& part : parts) {
    const bool starts_at_reachable = std::any_of(reachable.begin(), reachable.end(), [&](ValuePart r) {
      return same_point(r.index, r.count, part.index, part.count);
    });
    if (starts_at_reachable) reachable.push_back({part.index + 1, part.count});
  }
  return std::any_of(reachable.begin(), reachable.end(), [&](ValuePart r) { return r.index == r.count; });
}

}  // namespace

Expected<void> check_coverage(const SubTensor& consumer, std::span<const SubTensor> producers,
                              std::string_view tensor_name) {
  std::vector<SubTensor> relevant;
  for (const SubTensor& p : producers)
    if (p.tensor == consumer.tensor && box_intersection(p, consumer)) relevant.push_back(p);
  const std::size_t rank = consumer.box.size();
  std::vector<std::vector<IndexRange>> cells(rank);
  for (std::size_t d = 0; d < rank; ++d) cells[d] = cells_along(consumer.box[d], relevant, d);
  for (std::size_t d = 0; d < rank; ++d)
    if (cells[d].empty()) return {};  // empty box: nothing to cover

  // Odometer over the cartesian product of cells.
  std::vector<std::size_t> at(rank, 0);
  while (true) {
    std::vector<ValuePart> values;
    for (const SubTensor& p : relevant) {
      bool inside = true;
      for (std::size_t d = 0; d < rank && inside; ++d) inside = plan::contains(p.box[d], cells[d][at[d]]);
      if (inside) values.push_back(p.value);
    }
    if (!tiles_unit_interval(values)) {
      std::vector<std::string> where, found;
      for (std::size_t d = 0; d < rank; ++d) where.push_back(cells[d][at[d]].to_string());
      for (ValuePart v : values) found.push_back(v.to_string());
      return fail(fmt::format("tensor '{}' elements [{}] are not fully produced: the producers there hold value parts [{}], "
                              "which do not sum to the whole",
                              tensor_name, join(where, ", "), found.empty() ? "none" : join(found, ", ")),
                  "every consumed region needs producers whose value parts tile it exactly (or a replica of the whole)");
    }
    std::size_t d = rank;
    while (d > 0) {
      --d;
      if (++at[d] < cells[d].size()) break;
      at[d] = 0;
      if (d == 0) return {};
    }
    if (rank == 0) return {};
  }
}

}  // namespace loom::plan
