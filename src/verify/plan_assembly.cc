#include "plan_assembly.h"

#include <deque>
#include <map>
#include <numeric>

#include "loom/core/strings.h"
#include "loom/verify/ndarray_ops.h"

namespace loom::verify::detail {
namespace {

// Value-interval tilings get fine quickly under nested splits; beyond this the plan is not "small".
constexpr std::int64_t kMaxDenominator = 1 << 20;

// The fewest candidates whose value intervals tile `target`'s interval: breadth-first search over the
// interval endpoints scaled to integers by the lcm of the part counts. Candidates are tried in the order
// given, so among replicas the first written wins. Empty when no tiling exists.
std::vector<std::size_t> coarsest_tiling(std::span<const PlanPiece> pieces, const std::vector<std::size_t>& candidates,
                                         plan::ValuePart target) {
  std::int64_t denominator = target.count;
  for (std::size_t c : candidates) {
    denominator = std::lcm(denominator, pieces[c].tensor.value.count);
    if (denominator > kMaxDenominator) return {};
  }
  const auto point = [&](std::int64_t index, std::int64_t count) { return index * (denominator / count); };
  const std::int64_t begin = point(target.index, target.count), end = point(target.index + 1, target.count);
  const auto size = static_cast<std::size_t>(denominator) + 1;
  std::vector<std::ptrdiff_t> via(size, -1);  // candidate position that first reached each point
  std::vector<char> seen(size, 0);
  seen[static_cast<std::size_t>(begin)] = 1;
  std::deque<std::int64_t> queue = {begin};
  while (!queue.empty() && !seen[static_cast<std::size_t>(end)]) {
    const std::int64_t at = queue.front();
    queue.pop_front();
    for (std::size_t k = 0; k < candidates.size(); ++k) {
      const plan::ValuePart v = pieces[candidates[k]].tensor.value;
      if (point(v.index, v.count) != at || point(v.index + 1, v.count) > end) continue;
      const auto next = static_cast<std::size_t>(point(v.index + 1, v.count));
      if (seen[next]) continue;
      seen[next] = 1;
      via[next] = static_cast<std::ptrdiff_t>(k);
      queue.push_back(static_cast<std::int64_t>(next));
    }
  }
  if (!seen[static_cast<std::size_t>(end)]) return {};
  std::vector<std::size_t> chosen;
  for (auto at = static_cast<std::size_t>(end); at != static_cast<std::size_t>(begin);) {
    const std::size_t c = candidates[static_cast<std::size_t>(via[at])];
    chosen.push_back(c);
    at = static_cast<std::size_t>(point(pieces[c].tensor.value.index, pieces[c].tensor.value.count));
  }
  return chosen;
}

// The pieces an element sums and the factor applied to their sum; no pieces when nothing tiles.
struct Choice {
  std::vector<std::size_t> pieces;
  double factor = 1;
};

Choice choose(std::span<const PlanPiece> pieces, const std::vector<std::size_t>& candidates, const plan::SubTensor& consumer,
              Tiling tiling) {
  // The whole first: a fetched value part is the whole times its fraction, one decomposition every
  // consumer agrees on; only pieces of one part alone (a concatenation of boxes) stand for that part.
  const double fraction = 1.0 / static_cast<double>(consumer.value.count);
  std::vector<std::size_t> whole = coarsest_tiling(pieces, candidates, plan::ValuePart::whole());
  if (!whole.empty() || tiling == Tiling::whole) return {std::move(whole), fraction};
  return {coarsest_tiling(pieces, candidates, consumer.value), 1.0};
}

}  // namespace

std::size_t local_flat(const plan::SubTensor& piece, std::span<const std::int64_t> at) {
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < at.size(); ++d) {
    const plan::IndexRange& r = piece.box[d];
    flat = flat * r.size() + (at[d] - r.start) / r.step;
  }
  return static_cast<std::size_t>(flat);
}

bool holds(const plan::SubTensor& piece, std::span<const std::int64_t> at) {
  for (std::size_t d = 0; d < at.size(); ++d)
    if (!piece.box[d].contains(at[d])) return false;
  return true;
}

NdArray slice_strided(const NdArray& whole, std::span<const plan::IndexRange> box) {
  ir::Shape local;
  for (const plan::IndexRange& r : box) local.dims.push_back(r.size());
  NdArray out(local);
  const std::vector<std::int64_t> strides = strides_of(whole.shape);
  std::size_t next = 0;
  for_each_index(local, [&](std::span<const std::int64_t> index) {
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < index.size(); ++d) flat += (box[d].start + index[d] * box[d].step) * strides[d];
    out.data[next++] = whole.data[static_cast<std::size_t>(flat)];
  });
  return out;
}

Expected<NdArray> read_leaf(const ir::Graph& graph, const std::vector<NdArray>& initial, const plan::SubTensor& leaf) {
  const ir::FullTensor& full = graph.tensor(leaf.tensor);
  const std::size_t i = leaf.tensor.index();
  if (i >= initial.size() || initial[i].shape != full.shape || initial[i].data.size() != static_cast<std::size_t>(full.shape.numel()))
    return failf("leaf '{}' {} has no initial value", full.name, full.shape.to_string());
  NdArray local = slice_strided(initial[i], leaf.box);
  if (!leaf.value.is_whole())
    for (double& v : local.data) v /= static_cast<double>(leaf.value.count);
  return local;
}

Expected<NdArray> assemble(const plan::SubTensor& consumer, std::span<const PlanPiece> pieces, std::string_view tensor_name,
                           Tiling tiling) {
  std::vector<PlanPiece> relevant;  // only pieces meeting the box: keeps the per-element scan short
  for (const PlanPiece& p : pieces)
    if (plan::box_intersection(p.tensor, consumer)) relevant.push_back(p);
  NdArray out(consumer.local_shape());
  std::map<std::vector<std::size_t>, Choice> tilings;  // candidates -> chosen
  std::vector<std::int64_t> at(consumer.box.size());
  std::size_t next = 0;
  std::optional<Error> error;
  for_each_index(out.shape, [&](std::span<const std::int64_t> index) {
    if (error) return;
    for (std::size_t d = 0; d < index.size(); ++d) at[d] = consumer.box[d].start + index[d] * consumer.box[d].step;
    std::vector<std::size_t> candidates;
    for (std::size_t p = 0; p < relevant.size(); ++p)
      if (holds(relevant[p].tensor, at)) candidates.push_back(p);
    auto [it, fresh] = tilings.try_emplace(candidates);
    if (fresh) it->second = choose(relevant, candidates, consumer, tiling);
    if (it->second.pieces.empty()) {
      std::vector<std::string> where, found;
      for (std::int64_t i : at) where.push_back(std::to_string(i));
      for (std::size_t c : candidates) found.push_back(relevant[c].tensor.to_string());
      const std::string wanted = tiling == Tiling::whole || consumer.value.is_whole()
                                     ? "whole"
                                     : fmt::format("as {} or whole", consumer.value.to_string());
      error = Error{fmt::format("tensor '{}' element [{}] is not produced {}: the pieces there are [{}]", tensor_name,
                                join(where, ", "), wanted, found.empty() ? "none" : join(found, ", ")),
                    "every consumed element needs written value parts that tile the whole"};
      return;
    }
    double sum = 0;
    for (std::size_t c : it->second.pieces) sum += relevant[c].value.data[local_flat(relevant[c].tensor, at)];
    out.data[next++] = sum * it->second.factor;
  });
  if (error) return std::unexpected(*error);
  return out;
}

Expected<std::vector<NdArray>> assemble_values(const ir::Graph& graph, const std::vector<NdArray>& initial,
                                               std::span<const std::vector<PlanPiece>> pieces) {
  const std::vector<ir::OpId> producer = ir::producers(graph);
  std::vector<NdArray> values(graph.tensors.size());
  for (const ir::FullTensor& t : graph.tensors) {
    if (!producer[t.id.index()].valid()) {
      if (t.id.index() < initial.size()) values[t.id.index()] = initial[t.id.index()];
      continue;
    }
    std::span<const PlanPiece> written;
    if (t.id.index() < pieces.size()) written = pieces[t.id.index()];
    LOOM_ASSIGN_OR_RETURN(values[t.id.index()], assemble(plan::SubTensor::whole(t.id, t.shape), written, t.name));
  }
  return values;
}

}  // namespace loom::verify::detail
