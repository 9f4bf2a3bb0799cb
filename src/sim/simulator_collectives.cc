// The Simulator's collectives (simulator_core.h): a simulated member's arrival parks its stream until
// every member has arrived, each read where its class representative (or itself) reaches it; then the
// collective runs on all of them at once. A start runs so too, priced as the blocking collective of its
// kind over its inputs together (the runtime's flat bucket).
#include <fmt/format.h>

#include <algorithm>

#include "loom/exec/exec_text.h"
#include "simulator_core.h"

namespace loom::sim::detail {

Expected<void> Simulator::arrive(std::size_t a, const exec::CollectiveCall& c, double arrival) {
  auto it = pending_.find(c.tag);
  if (it == pending_.end()) {
    LOOM_ASSIGN_OR_RETURN(it, open(c));
  }
  it->second.parked.push_back(a);
  agents_[a].parked = true;
  return reach(agents_[a].slot, position(agents_[a]), arrival);  // releases it when a is the last
}

Expected<std::unordered_map<std::int64_t, PendingCollective>::iterator> Simulator::open(const exec::CollectiveCall& c) {
  LOOM_ASSIGN_OR_RETURN(const Members m, members(c));
  PendingCollective pending;
  pending.bytes = m.bytes;
  pending.slots = slots_of(m.keys);
  for (std::uint64_t k : m.keys) {
    const double t = reached(static_cast<std::size_t>(k >> 32), static_cast<std::uint32_t>(k));
    if (t == kUnknown) {
      ++pending.missing;
      waiters_at_[k].push_back(Waiter{true, c.tag});
    } else {
      pending.start = std::max(pending.start, t);
    }
  }
  return pending_.emplace(c.tag, std::move(pending)).first;
}

Expected<void> Simulator::release(std::int64_t tag) {
  const auto it = pending_.find(tag);
  PendingCollective done = std::move(it->second);
  pending_.erase(it);
  const Agent& first = agents_[done.parked.front()];
  const exec::CollectiveCall c = *exec::collective_call(at(first));
  LOOM_ASSIGN_OR_RETURN(const double seconds, duration(c, done.bytes));
  LOOM_ASSIGN_OR_RETURN(const double checked_seconds, checked(seconds, first));
  LOOM_ASSIGN_OR_RETURN(const double end, collective_end(done.start, checked_seconds, done.slots));
  const std::string name = label(at(first));
  for (std::size_t m : done.parked) {
    Agent& member = agents_[m];
    finish(member, EventKind::collective, name, done.start, end, exec::collective_call(at(member))->outputs);
    member.parked = false;
    wake(m);  // the last to arrive too: it goes on from the worklist
  }
  return {};
}

std::string Simulator::label(const exec::Instruction& instruction) const {
  if (const auto* start = std::get_if<exec::CollectiveStart>(&instruction)) return exec::collective_label(exec_, *start);
  return exec::collective_label(exec_, std::get<exec::Collective>(instruction));
}

std::int64_t Simulator::input_bytes(const exec::CollectiveCall& c) const {
  std::int64_t total = 0;
  for (exec::BufferId b : c.inputs) total += bytes(b);
  return total;
}

Expected<double> Simulator::duration(const exec::CollectiveCall& c, std::int64_t bytes) const {
  if (!durations_.collective) return fail("the plan has collectives but Durations::collective is not set");
  return durations_.collective(priced_collective(c), bytes);
}

Expected<double> Simulator::collective_end(double start, double duration, const std::vector<std::size_t>& slots) {
  double end = start + duration;
  for (std::size_t slot : slots) {
    LOOM_ASSIGN_OR_RETURN(const double member_end, stretched(slot, start, duration));
    end = std::max(end, member_end);
  }
  return end;
}

// Errors: a group whose programs do not all run it, a member whose representative has no collective at
// its position.
Expected<Simulator::Members> Simulator::members(const exec::CollectiveCall& c) const {
  const std::span<const Site> sites = index_.collective(c.tag);
  if (folded_) return folded_members(c, sites);
  if (sites.size() != c.group.size())
    return fail(fmt::format("collective #{} has a group of {} devices but {} programs run it", c.tag, c.group.size(),
                            sites.size()),
                "check the plan with check_exec_plan");
  Members out;
  out.keys.reserve(sites.size());
  for (const Site& site : sites) {
    const std::size_t slot = slot_for(site.device);
    const auto& program = exec_.programs[static_cast<std::size_t>(slots_[slot].device)];
    if (site.instruction >= program.size() || !exec::is_collective_call(program[site.instruction]))
      return fail(fmt::format("device {}'s collective #{} sits at instruction {}, where its representative {} has none",
                              site.device, c.tag, site.instruction, slots_[slot].device),
                  "the device classes are not a symmetry; simulate with use_device_classes = false");
    const auto member = exec::collective_call(exec_.programs[static_cast<std::size_t>(site.device)][site.instruction]);
    out.bytes = std::max(out.bytes, input_bytes(*member));
    out.keys.push_back(key(slot, site.instruction));
  }
  std::ranges::sort(out.keys);
  out.keys.erase(std::unique(out.keys.begin(), out.keys.end()), out.keys.end());
  return out;
}

// In a folded step only representatives run collectives: every member arrives when its representative
// reaches the collective, which the representative must run.
Expected<Simulator::Members> Simulator::folded_members(const exec::CollectiveCall& c, std::span<const Site> sites) const {
  Members out;
  for (const Site& site : sites) {
    const auto member = exec::collective_call(exec_.programs[static_cast<std::size_t>(site.device)][site.instruction]);
    out.bytes = std::max(out.bytes, input_bytes(*member));
    if (represented_by_[static_cast<std::size_t>(site.device)] == site.device)
      out.keys.push_back(key(slot_for(site.device), site.instruction));
  }
  for (int g : c.group) {
    const bool runs = is_device(g) && std::ranges::any_of(sites, [&](const Site& site) {
      return site.device == represented_by_[static_cast<std::size_t>(g)];
    });
    if (!runs)
      return fail(fmt::format("collective #{}: member {}'s representative does not run it", c.tag, g),
                  "a folded step needs every collective run by its members' representatives");
  }
  std::ranges::sort(out.keys);
  return out;
}

std::vector<std::size_t> Simulator::slots_of(const std::vector<std::uint64_t>& keys) {
  std::vector<std::size_t> slots;
  for (std::uint64_t k : keys)
    if (slots.empty() || slots.back() != static_cast<std::size_t>(k >> 32)) slots.push_back(static_cast<std::size_t>(k >> 32));
  return slots;
}

}  // namespace loom::sim::detail
