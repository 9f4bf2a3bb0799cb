// Where every collective member and send sits in the device programs: what the simulator needs to
// find a collective member's arrival or a recv's matching send without simulating the other device, and
// what the symmetry check compares. Built by one pass over all programs; lookups are binary searches.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"

namespace loom::sim {

// One instruction of one device's program.
struct Site {
  int device = 0;
  std::uint32_t instruction = 0;
  bool operator==(const Site&) const = default;
};

class CommIndex {
 public:
  // Errors: two sends with the same sender, receiver and tag.
  static Expected<CommIndex> build(const exec::ExecPlan& exec);

  // The instructions of collective `tag`, by device ascending; empty when no program has it.
  std::span<const Site> collective(std::int64_t tag) const;
  // The position in `src`'s program of its send to `dst` with `tag`.
  std::optional<std::uint32_t> send(int src, int dst, std::int64_t tag) const;

 private:
  struct Transfer {
    int src = 0, dst = 0;
    std::int64_t tag = 0;
    std::uint32_t instruction = 0;
  };
  std::vector<std::int64_t> tags_;        // distinct collective tags, ascending
  std::vector<std::size_t> offsets_;      // tags_[k]'s sites are sites_[offsets_[k], offsets_[k + 1])
  std::vector<Site> sites_;
  std::vector<Transfer> sends_;           // sorted by (src, dst, tag)
};

}  // namespace loom::sim
