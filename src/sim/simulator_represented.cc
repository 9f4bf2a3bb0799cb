// The check on the times after simulating one device per class (symmetry.h, simulator_core.h): each
// device not simulated is compared, at every collective and recv, with what its representative saw.
#include <fmt/format.h>

#include <algorithm>

#include "loom/exec/exec_text.h"
#include "simulator_core.h"

namespace loom::sim::detail {

Expected<std::string> Simulator::check_represented() {
  for (int d = 0; d < exec_.num_devices; ++d) {
    const int r = represented_by_[static_cast<std::size_t>(d)];
    if (r == d) continue;
    const auto& mine = exec_.programs[static_cast<std::size_t>(d)];
    const auto& theirs = exec_.programs[static_cast<std::size_t>(r)];
    for (std::uint32_t i = 0; i < mine.size() && i < theirs.size(); ++i) {
      std::string why;
      if (const auto* a = std::get_if<exec::Recv>(&mine[i]); a != nullptr) {
        const auto* b = std::get_if<exec::Recv>(&theirs[i]);
        const double seen = b != nullptr ? issue_seen(*a, d) : kUnknown;
        const double theirs_seen = b != nullptr ? issue_seen(*b, r) : kUnknown;
        if (seen == kUnknown || seen != theirs_seen)
          why = fmt::format("its sender issues at {} s, the representative's at {} s", seen, theirs_seen);
      } else if (const auto a = exec::collective_call(mine[i])) {
        const auto b = exec::collective_call(theirs[i]);
        if (!b || a->asynchronous != b->asynchronous) {
          why = "the representative has no collective of its kind there";
        } else {
          LOOM_ASSIGN_OR_RETURN(const auto my_span, span(*a));
          LOOM_ASSIGN_OR_RETURN(const auto their_span, span(*b));
          if (my_span != their_span)
            why = fmt::format("it runs over [{}, {}] s, the representative's over [{}, {}] s", my_span.first,
                              my_span.second, their_span.first, their_span.second);
        }
      }
      if (!why.empty())
        return fmt::format("device {}'s instruction {} ({}) waits differently from its class representative {}'s: {}",
                           d, i, exec::instruction_to_text(exec_, mine[i]), r, why);
    }
  }
  return std::string();
}

Expected<std::pair<double, double>> Simulator::span(const exec::CollectiveCall& c) {
  if (const auto it = spans_.find(c.tag); it != spans_.end()) return it->second;
  LOOM_ASSIGN_OR_RETURN(const Members m, members(c));
  double start = 0;
  for (std::uint64_t k : m.keys) start = std::max(start, reached(static_cast<std::size_t>(k >> 32), static_cast<std::uint32_t>(k)));
  LOOM_ASSIGN_OR_RETURN(const double seconds, duration(c, m.bytes));
  LOOM_ASSIGN_OR_RETURN(const double end, collective_end(start, seconds, slots_of(m.keys)));
  return spans_[c.tag] = {start, end};
}

double Simulator::issue_seen(const exec::Recv& r, int d) const {
  if (!is_device(r.peer)) return kUnknown;
  const std::optional<std::uint32_t> sent = index_.send(r.peer, d, r.tag);
  return sent ? reached(slot_for(r.peer), *sent) : kUnknown;
}

}  // namespace loom::sim::detail
