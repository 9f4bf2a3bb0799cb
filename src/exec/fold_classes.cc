#include "fold_classes.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "loom/exec/instruction_buffers.h"

namespace loom::exec {
namespace {

// Where every collective member and send sits in the slice's programs.
struct Sites {
  std::map<std::int64_t, std::vector<std::pair<int, std::uint32_t>>> collectives;  // by tag: (device, position)
  std::map<std::tuple<int, int, std::int64_t>, std::uint32_t> sends;               // (src, dst, tag) -> position
};

Sites sites_of(const ExecPlan& slice) {
  Sites sites;
  for (int d = 0; d < slice.num_devices; ++d) {
    const auto& program = slice.programs[static_cast<std::size_t>(d)];
    for (std::uint32_t i = 0; i < program.size(); ++i) {
      if (const auto call = collective_call(program[i])) sites.collectives[call->tag].emplace_back(d, i);
      else if (const auto* s = std::get_if<Send>(&program[i])) sites.sends[{d, s->peer, s->tag}] = i;
    }
  }
  return sites;
}

class Refiner {
 public:
  Refiner(const ExecPlan& slice, const std::vector<std::vector<int>>& segments, const std::vector<int>& node_of)
      : slice_(slice), sites_(sites_of(slice)), node_of_(node_of) {
    std::map<std::vector<int>, std::int64_t> ids;
    for (const auto& seg : segments) segment_id_.push_back(ids.try_emplace(seg, ids.size()).first->second);
    for (const auto& [tag, members] : sites_.collectives) {
      const auto call = *collective_call(at(members.front()));
      std::map<int, std::int64_t> per_node;
      for (int g : call.group) ++per_node[node(g)];
      std::vector<std::int64_t> pattern;
      for (const auto& [n, count] : per_node) pattern.push_back(count);
      std::ranges::sort(pattern);
      pattern_[tag] = patterns_.try_emplace(pattern, patterns_.size()).first->second;
    }
  }

  // One refinement: devices of a class stay together where their signatures (fold_classes.h) agree.
  // Classes are numbered by first device.
  std::vector<int> refine(const std::vector<int>& class_of) const {
    // Each collective's members as (class, position), as an id: equal sets, equal ids.
    std::map<std::vector<std::int64_t>, std::int64_t> set_ids;
    std::unordered_map<std::int64_t, std::int64_t> members_id;
    std::vector<std::int64_t> key;
    for (const auto& [tag, members] : sites_.collectives) {
      key.clear();
      for (const auto& [d, i] : members) key.push_back((std::int64_t{class_of[static_cast<std::size_t>(d)]} << 32) | i);
      std::ranges::sort(key);
      key.erase(std::unique(key.begin(), key.end()), key.end());
      key.push_back(pattern_.at(tag));
      members_id[tag] = set_ids.try_emplace(key, set_ids.size()).first->second;
    }
    std::map<std::vector<std::int64_t>, int> classes;
    std::vector<int> refined;
    std::vector<std::int64_t> signature;
    for (int d = 0; d < slice_.num_devices; ++d) {
      signature.assign({class_of[static_cast<std::size_t>(d)], segment_id_[static_cast<std::size_t>(d)]});
      const auto& program = slice_.programs[static_cast<std::size_t>(d)];
      for (std::uint32_t i = 0; i < program.size(); ++i) {
        if (const auto call = collective_call(program[i])) {
          signature.insert(signature.end(), {i, members_id.at(call->tag)});
        } else if (const auto* r = std::get_if<Recv>(&program[i])) {
          const auto sent = sites_.sends.find({r->peer, d, r->tag});
          const bool known = sent != sites_.sends.end() && r->peer >= 0 && r->peer < slice_.num_devices;
          signature.insert(signature.end(), {i, known ? class_of[static_cast<std::size_t>(r->peer)] : -1,
                                             known ? std::int64_t{sent->second} : -1, node(r->peer) == node(d)});
        } else if (const auto* s = std::get_if<Send>(&program[i])) {
          signature.insert(signature.end(), {i, node(s->peer) == node(d)});
        }
      }
      refined.push_back(classes.try_emplace(signature, static_cast<int>(classes.size())).first->second);
    }
    return refined;
  }

 private:
  const Instruction& at(std::pair<int, std::uint32_t> site) const {
    return slice_.programs[static_cast<std::size_t>(site.first)][site.second];
  }
  int node(int d) const {
    return d >= 0 && static_cast<std::size_t>(d) < node_of_.size() ? node_of_[static_cast<std::size_t>(d)] : -1;
  }

  const ExecPlan& slice_;
  const Sites sites_;
  const std::vector<int>& node_of_;
  std::vector<std::int64_t> segment_id_;                    // by device
  std::map<std::vector<std::int64_t>, std::int64_t> patterns_;  // members per node, sorted -> id
  std::unordered_map<std::int64_t, std::int64_t> pattern_;      // by tag
};

// A class whose representative runs a collective without one of its members' representatives: that
// member becomes its own class (the folded simulation reads a member's arrival where its representative
// runs the same collective). Programs equal up to renaming need not map a sub-group collective onto one
// their representative runs (a member of another node falls to a representative outside the group). True
// when it split one.
bool close_over_collectives(const ExecPlan& slice, std::vector<int>& class_of) {
  std::vector<int> representative;  // by class: its first device
  for (int d = 0; d < slice.num_devices; ++d)
    if (class_of[static_cast<std::size_t>(d)] == static_cast<int>(representative.size())) representative.push_back(d);
  bool split = false;
  for (const int r : std::vector<int>(representative)) {
    for (const Instruction& in : slice.programs[static_cast<std::size_t>(r)]) {
      const auto call = collective_call(in);
      if (!call) continue;
      for (int g : call->group) {
        if (g < 0 || g >= slice.num_devices) continue;
        const int rep = representative[static_cast<std::size_t>(class_of[static_cast<std::size_t>(g)])];
        if (std::ranges::find(call->group, rep) != call->group.end()) continue;
        class_of[static_cast<std::size_t>(g)] = static_cast<int>(representative.size());
        representative.push_back(g);
        split = true;
      }
    }
  }
  return split;
}

// Classes numbered by first device.
std::size_t renumber(std::vector<int>& class_of) {
  std::map<int, int> number;
  for (int& c : class_of) c = number.try_emplace(c, static_cast<int>(number.size())).first->second;
  return number.size();
}

}  // namespace

DeviceClasses fold_classes(const ExecPlan& slice, const DeviceClasses& programs,
                           const std::vector<std::vector<int>>& segments, const std::vector<int>& node_of) {
  if (slice.num_devices == 0) return programs;
  const Refiner refiner(slice, segments, node_of);
  std::vector<int> class_of = programs.class_of;
  std::size_t count = renumber(class_of);
  for (;;) {
    class_of = refiner.refine(class_of);
    std::size_t classes = renumber(class_of);
    if (classes == count) {  // a refinement only splits: as many classes, the same ones
      if (!close_over_collectives(slice, class_of)) break;
      classes = renumber(class_of);
    }
    count = classes;
  }
  DeviceClasses out{.class_of = std::move(class_of), .representatives = {}};
  for (int d = 0; d < slice.num_devices; ++d)
    if (out.class_of[static_cast<std::size_t>(d)] == static_cast<int>(out.representatives.size()))
      out.representatives.push_back(d);
  return out;
}

}  // namespace loom::exec
