#include "loom/plan/index_range.h"

#include <numeric>

#include <fmt/format.h>

namespace loom::plan {

// 128-bit products keep rational comparisons exact; __extension__ keeps -Wpedantic quiet.
__extension__ typedef __int128 Int128;

IndexRange IndexRange::normalized() const {
  if (empty()) return {0, 0, 1};
  return {start, last() + 1, size() == 1 ? 1 : step};
}

std::string IndexRange::to_string() const {
  if (step == 1) return fmt::format("{}:{}", start, stop);
  return fmt::format("{}:{}:{}", start, stop, step);
}

namespace {

// Extended Euclid: returns g = gcd(a, b) and x with a·x ≡ g (mod b).
std::int64_t inverse_part(std::int64_t a, std::int64_t b, std::int64_t& g) {
  std::int64_t old_r = a, r = b, old_s = 1, s = 0;
  while (r != 0) {
    const std::int64_t q = old_r / r;
    old_r -= q * r;
    std::swap(old_r, r);
    old_s -= q * s;
    std::swap(old_s, s);
  }
  g = old_r;
  return old_s;
}

std::int64_t floor_mod(std::int64_t a, std::int64_t m) { return ((a % m) + m) % m; }

}  // namespace

IndexRange intersect(const IndexRange& a, const IndexRange& b) {
  if (a.empty() || b.empty()) return {0, 0, 1};
  const std::int64_t lo = std::max(a.start, b.start), hi = std::min(a.stop, b.stop);
  if (lo >= hi) return {0, 0, 1};
  // Solve i ≡ a.start (mod a.step), i ≡ b.start (mod b.step).
  std::int64_t g = 0;
  const std::int64_t x = inverse_part(a.step, b.step, g);
  const std::int64_t diff = b.start - a.start;
  if (diff % g != 0) return {0, 0, 1};
  const std::int64_t lcm = a.step / g * b.step;
  const std::int64_t m = b.step / g;
  // i = a.start + a.step * t, with t ≡ (diff / g) * x (mod m).
  const std::int64_t t = m == 1 ? 0 : floor_mod(static_cast<std::int64_t>((static_cast<Int128>(diff / g) * x) % m), m);
  const std::int64_t base = a.start + a.step * t;  // one solution
  // First solution >= lo.
  const std::int64_t first = lo + floor_mod(base - lo, lcm);
  if (first >= hi) return {0, 0, 1};
  return IndexRange{first, hi, lcm}.normalized();
}

bool contains(const IndexRange& outer, const IndexRange& inner) {
  if (inner.empty()) return true;
  return intersect(outer, inner).size() == inner.size();
}

IndexRange split_range(const IndexRange& range, std::int64_t parts, std::int64_t index, bool strided) {
  if (parts < 1 || index < 0 || index >= parts) return {0, 0, 1};  // no such part
  const std::int64_t chunk = range.size() / parts;
  if (strided) return IndexRange{range.start + index * range.step, range.stop, range.step * parts}.normalized();
  const std::int64_t first = range.start + index * chunk * range.step;
  return IndexRange{first, first + (chunk - 1) * range.step + 1, range.step}.normalized();
}

}  // namespace loom::plan
