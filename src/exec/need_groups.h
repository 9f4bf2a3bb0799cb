// Private to materialization: pieces wanted on devices, as hash keys, and the grouping of one consumer
// op's needs of one tensor into candidates for the layout search.
#pragma once

#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "piece_layout.h"
#include "loom/plan/plan.h"

namespace loom::exec::detail {

// A piece wanted on a device (boxes normalized), and a view of one for lookups that allocate nothing.
struct NeedKey {
  int device;
  plan::SubTensor piece;
};
struct NeedView {
  int device;
  const plan::SubTensor* piece;
};
struct NeedKeyHash {
  using is_transparent = void;
  static std::size_t hash(int device, const plan::SubTensor& t) {
    return static_cast<std::size_t>(plan::piece_hash(t, true) ^ (static_cast<std::uint64_t>(device) * 0x9e3779b97f4a7c15ull));
  }
  std::size_t operator()(const NeedKey& k) const { return hash(k.device, k.piece); }
  std::size_t operator()(const NeedView& k) const { return hash(k.device, *k.piece); }
};
struct NeedKeyEq {
  using is_transparent = void;
  static bool same(int da, const plan::SubTensor& a, int db, const plan::SubTensor& b) {
    return da == db && plan::same_piece(a, b, true);
  }
  bool operator()(const NeedKey& a, const NeedKey& b) const { return same(a.device, a.piece, b.device, b.piece); }
  bool operator()(const NeedView& a, const NeedKey& b) const { return same(a.device, *a.piece, b.device, b.piece); }
  bool operator()(const NeedKey& a, const NeedView& b) const { return same(a.device, a.piece, b.device, *b.piece); }
};
template <class T>
using NeedMap = std::unordered_map<NeedKey, T, NeedKeyHash, NeedKeyEq>;

using OutputRef = std::pair<plan::SubOpId, std::size_t>;  // (sub-op, output index)

// The whole-valued pieces of one tensor that one consumer op needs, split into groups connected through
// the producer pieces they overlap: each group is one candidate for the layout search (e.g. one
// micro-batch's rows).
struct NeedGroup {
  std::vector<PlacedPiece> needs;
  std::vector<OutputRef> producers;
  bool tried = false;
};
struct ConsumerNeeds {
  std::vector<NeedGroup> groups;
  NeedMap<std::size_t> group_of;
  std::map<OutputRef, std::size_t> group_of_producer;  // the producer pieces that some group holds
  // The set of searches (concurrent_steps.h) the groups' searches join where they run at once; -1: none.
  std::int64_t concurrent = -1;
};

// `producers`: every output piece of the tensor in the plan.
ConsumerNeeds group_needs(const plan::Plan& plan, ir::OpId op, ir::TensorId tensor, const std::vector<OutputRef>& producers);

}  // namespace loom::exec::detail
