// Private to materialization: layout searches that run at once share their steps. One tensor's needs
// are moved by a layout search per group (need_groups.h, move_pieces.h: one per tp piece's box), so the
// dp gradient all-reduces of a weight's tp pieces, or ZeRO-3's gathers and reduce-scatters of them, come
// from separate searches, each of whose steps is priced alone; yet every piece's collectives run at the
// same point, and across nodes they share the nodes' NICs (the search's analytic model prices them so,
// search/analytic_cost.cc). The caller opens a set around the searches of one tensor's needs that run
// at once; each search lowered while the set is current records its collectives per step. Once the
// plan is complete, the searches of a set over pairwise disjoint devices (a device in two searches runs
// them one after the other) are joined step by step: the collectives of step k of each, where those
// steps have one primitive, become groups of one step (exec::CollectiveInfo::step) of all their groups,
// so the simulator prices each as that whole step, as one comm::Step of the search would be. A p2p step's
// groups are the devices its sends link, and its sends get the joined step: where exchange_to_all_reduce
// turns each piece's exchange of value parts into an all-reduce (a small gradient's dp reduction), that
// all-reduce is priced with the other pieces' (exec/passes.h).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "loom/comm/step.h"
#include "loom/exec/exec_plan.h"

namespace loom::exec::detail {

class ConcurrentSteps {
 public:
  // While alive, the searches begun join set `set` (from new_set; -1: none), then the previous set is
  // current again.
  class Scope {
   public:
    Scope(ConcurrentSteps& steps, std::int64_t set) : steps_(steps), previous_(steps.current_) { steps.current_ = set; }
    ~Scope() { steps_.current_ = previous_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ConcurrentSteps& steps_;
    std::int64_t previous_;
  };

  std::int64_t new_set() { return sets_++; }

  // A layout search over `devices` (those of its layouts) begins: its number, or -1 outside a set.
  std::int64_t begin_search(std::vector<int> devices);

  // Step `index` of search `search` (begin_search; nothing for -1) was lowered to the collectives
  // `tags`, one per group of `groups`.
  void lowered(std::int64_t search, std::size_t index, comm::Primitive primitive,
               const std::vector<std::vector<int>>& groups, std::vector<std::int64_t> tags);

  // Points the collectives of joined steps (above) at the step of all their groups, which `group_step`
  // gives (ProgramBuilder::group_step, so equal lists share one).
  void share(ExecPlan& exec, const std::function<std::int64_t(const std::vector<std::vector<int>>&)>& group_step) const;

 private:
  struct Search {
    std::int64_t set = 0;
    std::vector<int> devices;  // ascending
  };
  struct Lowered {
    std::int64_t search = 0;
    std::size_t index = 0;
    comm::Primitive primitive = comm::Primitive::all_reduce;
    std::vector<std::vector<int>> groups;
    std::vector<std::int64_t> tags;
  };

  std::int64_t sets_ = 0, current_ = -1;
  std::vector<Search> searches_;
  std::vector<Lowered> lowered_;
};

}  // namespace loom::exec::detail
