// Matching for check_exec_plan (check.h): sends with recvs, and the members of each collective. Sites
// are sorted by key (a flat sort beats a hash map at millions of instructions), then each run of equal
// keys is checked; errors come in key order, so the same plan always gets the same message.
#include <algorithm>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "check_internal.h"
#include "loom/comm/layout.h"
#include "loom/exec/exec_text.h"
#include "loom/exec/instruction_buffers.h"

namespace loom::exec::detail {
namespace {

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

template <class T>
const T& instruction_at(const ExecPlan& exec, const Links& links, std::uint32_t global) {
  return std::get<T>(exec.programs[static_cast<std::size_t>(links.device_of(global))][links.index_of(global)]);
}

// The run [first, last) of one (sender, receiver, tag): sends first, then recvs, each in program order.
Expected<void> match_transfer(const ExecPlan& exec, const TransferSite* first, const TransferSite* last, Links& links) {
  const TransferSite* recvs = std::find_if(first, last, [](const TransferSite& s) { return s.recv; });
  for (const auto& [from, to] : {std::pair{first, recvs}, std::pair{recvs, last}})
    if (to - from > 1)
      return fail(fmt::format("{}: repeats tag {} between devices {} and {} (first at instruction {})",
                              site_to_text(exec, links, from[1].global), first->tag, first->sender, first->receiver,
                              links.index_of(from->global)),
                  "tags tell apart the transfers between a pair of devices: give each its own");
  if (recvs == first)
    return fail(fmt::format("{} has no matching send on device {}", site_to_text(exec, links, first->global), first->sender),
                "every recv needs a send from its peer with the same tag");
  if (recvs == last)
    return fail(fmt::format("{} has no matching recv on device {}", site_to_text(exec, links, first->global), first->receiver),
                "every send needs a recv on its peer with the same tag");
  const BufferId sent = instruction_at<Send>(exec, links, first->global).buffer;
  const BufferId got = instruction_at<Recv>(exec, links, recvs->global).buffer;
  const Buffer& from = exec.buffer(sent);
  const Buffer& to = exec.buffer(got);
  if (!same_piece(from.piece, to.piece) || from.bytes != to.bytes)
    return fail(fmt::format("send #{} from device {} to {} carries {} ({} bytes), but the recv writes {} ({} bytes): pieces differ",
                            first->tag, first->sender, first->receiver, buffer_to_text(exec, sent), from.bytes,
                            buffer_to_text(exec, got), to.bytes),
                "a recv's buffer holds the same SubTensor, of the same bytes, as its send's");
  links.link[first->global] = recvs->global;
  links.link[recvs->global] = first->global;
  return {};
}

CollectiveCall call_at(const ExecPlan& exec, const Links& links, std::uint32_t global) {
  return *collective_call(exec.programs[static_cast<std::size_t>(links.device_of(global))][links.index_of(global)]);
}

std::string label_at(const ExecPlan& exec, const Links& links, std::uint32_t global) {
  const Instruction& in = exec.programs[static_cast<std::size_t>(links.device_of(global))][links.index_of(global)];
  if (const auto* start = std::get_if<CollectiveStart>(&in)) return collective_label(exec, *start);
  return collective_label(exec, std::get<Collective>(in));
}

// The group of a tag's first member: devices in range, each once. `seen` marks devices by slot.
Expected<void> check_group(const ExecPlan& exec, const Links& links, std::uint32_t global, std::uint32_t slot,
                           std::vector<std::uint32_t>& seen) {
  const std::span<const int> group = call_at(exec, links, global).group;
  const std::vector<int> devices(group.begin(), group.end());
  for (int m : group) {
    if (m < 0 || m >= exec.num_devices)
      return fail(fmt::format("{}: has group {} with devices outside 0-{}", site_to_text(exec, links, global),
                              comm::devices_to_string(devices), exec.num_devices - 1),
                  "a group lists devices of the plan");
    if (seen[static_cast<std::size_t>(m)] == slot)
      return fail(fmt::format("{}: has group {}, which lists a device twice", site_to_text(exec, links, global),
                              comm::devices_to_string(devices)),
                  "a group lists each member once");
    seen[static_cast<std::size_t>(m)] = slot;
  }
  return {};
}

// Starts of one tag: the same number of buffers, and per position i, every member's buffers of one
// tensor: an all-reduce's inputs and outputs all of one box (each member's part of one bucketed
// tensor), an all-gather's outputs of one box holding both members' inputs (each member's shard), a
// reduce-scatter's inputs of one box holding both members' outputs (its mirror).
bool same_bucket(const ExecPlan& exec, const CollectiveCall& a, const CollectiveCall& b) {
  if (a.inputs.size() != b.inputs.size() || a.outputs.size() != b.outputs.size()) return false;
  const bool gather = a.kind == comm::Primitive::all_gather;
  const bool scatter = a.kind == comm::Primitive::reduce_scatter;
  // The buffers every member holds of one box (a scatter's inputs, else the outputs) and the others.
  const auto common = [&](const CollectiveCall& c, std::size_t i) { return scatter ? c.inputs[i] : c.outputs[i]; };
  const auto own = [&](const CollectiveCall& c, std::size_t i) { return scatter ? c.outputs[i] : c.inputs[i]; };
  for (std::size_t i = 0; i < a.inputs.size(); ++i) {
    const plan::SubTensor& whole = exec.buffer(common(a, i)).piece;
    const plan::SubTensor& theirs = exec.buffer(common(b, i)).piece;
    if (theirs.tensor != whole.tensor || !same_box(theirs.box, whole.box)) return false;
    for (BufferId part : {own(a, i), own(b, i)}) {
      const plan::SubTensor& p = exec.buffer(part).piece;
      const bool inside = gather || scatter ? box_contains(whole.box, p.box) : same_box(p.box, whole.box);
      if (p.tensor != whole.tensor || !inside) return false;
    }
  }
  return true;
}

// The run [first, last) of one tag, in program order (so by device).
Expected<void> match_collective(const ExecPlan& exec, const CollectiveSite* first, const CollectiveSite* last,
                                std::uint32_t slot, std::vector<std::uint32_t>& seen, std::vector<std::uint32_t>& present,
                                Links& links) {
  LOOM_RETURN_IF_ERROR(check_group(exec, links, first->global, slot, seen));
  const CollectiveCall reference = call_at(exec, links, first->global);
  int previous = -1;
  for (const CollectiveSite* s = first; s != last; ++s) {
    const int device = links.device_of(s->global);
    const CollectiveCall c = call_at(exec, links, s->global);
    auto disagree = [&](std::string_view what, std::string_view hint) {
      return fail(fmt::format("{}: {} disagree: device {}, instruction {} runs {}", site_to_text(exec, links, s->global), what,
                              links.device_of(first->global), links.index_of(first->global),
                              label_at(exec, links, first->global)),
                  std::string(hint));
    };
    if (c.asynchronous != reference.asynchronous)
      return disagree("blocking and asynchronous members", "members of a collective all block, or all start and wait");
    if (c.kind != reference.kind) return disagree("kinds", "members of a collective run one kind");
    if (!std::ranges::equal(c.group, reference.group))
      return disagree("groups", "members of a collective list one group, in one order");
    if (c.asynchronous && !same_bucket(exec, c, reference))
      return disagree("buckets", "members of a start hold, position by position, the same box of the same tensor");
    if (device == previous)
      return fail(fmt::format("{}: runs collective tag {} twice (first at instruction {})", site_to_text(exec, links, s->global),
                              s->tag, links.index_of(s[-1].global)),
                  "each member runs a collective once; give each collective its own tag");
    previous = device;
    present[static_cast<std::size_t>(device)] = slot;
    links.link[s->global] = slot;
    links.members.push_back(s->global);
  }
  // Every site's device is in its (equal) group and appears once, so a short run means a missing member.
  for (int m : reference.group)
    if (present[static_cast<std::size_t>(m)] != slot)
      return fail(fmt::format("{}: device {} of its group never runs it", label_at(exec, links, first->global), m),
                  "every member of a collective's group runs it exactly once");
  return {};
}

}  // namespace

Expected<void> match_transfers(const ExecPlan& exec, std::vector<TransferSite>& sites, Links& links) {
  auto key = [](const TransferSite& s) { return std::tuple(s.sender, s.receiver, s.tag); };
  std::sort(sites.begin(), sites.end(), [&](const TransferSite& a, const TransferSite& b) {
    return std::tuple(key(a), a.recv, a.global) < std::tuple(key(b), b.recv, b.global);
  });
  for (std::size_t i = 0, j = 0; i < sites.size(); i = j) {
    while (j < sites.size() && key(sites[j]) == key(sites[i])) ++j;
    LOOM_RETURN_IF_ERROR(match_transfer(exec, sites.data() + i, sites.data() + j, links));
  }
  return {};
}

Expected<void> match_collectives(const ExecPlan& exec, std::vector<CollectiveSite>& sites,
                                 const std::vector<CollectiveSite>& waits, Links& links) {
  std::sort(sites.begin(), sites.end(),
            [](const CollectiveSite& a, const CollectiveSite& b) { return std::tie(a.tag, a.global) < std::tie(b.tag, b.global); });
  std::vector<std::uint32_t> seen(static_cast<std::size_t>(exec.num_devices), kNone);
  std::vector<std::uint32_t> present(static_cast<std::size_t>(exec.num_devices), kNone);
  links.members.reserve(sites.size());
  for (std::size_t i = 0, j = 0; i < sites.size(); i = j) {
    while (j < sites.size() && sites[j].tag == sites[i].tag) ++j;
    links.member_offsets.push_back(static_cast<std::uint32_t>(links.members.size()));
    links.slot_tags.push_back(sites[i].tag);
    LOOM_RETURN_IF_ERROR(match_collective(exec, sites.data() + i, sites.data() + j, links.slots, seen, present, links));
    ++links.slots;
  }
  links.member_offsets.push_back(static_cast<std::uint32_t>(links.members.size()));
  // A wait follows its device's start of the tag (the walk checked it), so the tag has a slot.
  for (const CollectiveSite& w : waits)
    links.link[w.global] = static_cast<std::uint32_t>(std::ranges::lower_bound(links.slot_tags, w.tag) - links.slot_tags.begin());
  return {};
}

}  // namespace loom::exec::detail
