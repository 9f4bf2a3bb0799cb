// Private to check_exec_plan (check.h). The structural walk (check_structure.cc) checks each instruction
// in program order and records the sends, recvs and collective members it meets; the matching
// (check_matching.cc) pairs them up by sorting; the progress pass (check_progress.cc) simulates execution
// over the resulting links.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"

namespace loom::exec::detail {

// Instructions numbered across devices: device d's instruction i is offsets[d] + i.
struct Links {
  std::vector<std::uint32_t> offsets;  // by device, plus the total at the end
  // By global number: for a send or recv, the global number of its partner; for a collective, a start
  // or a wait, its tag's slot (0, 1, ... in tag order); unused otherwise.
  std::vector<std::uint32_t> link;
  std::uint32_t slots = 0;
  std::vector<std::int64_t> slot_tags;        // by slot
  // The global numbers of slot s's members (collectives or starts, by device ascending):
  // members[member_offsets[s] .. member_offsets[s + 1]).
  std::vector<std::uint32_t> members, member_offsets;

  std::uint32_t global(int device, std::uint32_t index) const {
    return offsets[static_cast<std::size_t>(device)] + index;
  }
  int device_of(std::uint32_t global) const;
  std::uint32_t index_of(std::uint32_t global) const {
    return global - offsets[static_cast<std::size_t>(device_of(global))];
  }
};

// A send or recv met by the walk, keyed by (sender, receiver, tag).
struct TransferSite {
  int sender = 0;
  int receiver = 0;
  std::int64_t tag = 0;
  bool recv = false;
  std::uint32_t global = 0;
};

// A collective or start member met by the walk (its kind already a collective, its device in its
// group), or a wait (after its device's start of the tag).
struct CollectiveSite {
  std::int64_t tag = 0;
  std::uint32_t global = 0;
};

// Every index of `inner` lies in `outer` (boxes of one tensor, one range per dimension).
bool box_contains(const std::vector<plan::IndexRange>& outer, const std::vector<plan::IndexRange>& inner);

// Everything check.h lists under "Structure"; on success, the links the progress pass needs.
Expected<Links> check_structure(const ExecPlan& exec);

// One send with one recv per (sender, receiver, tag), carrying equal pieces and bytes; fills the links.
Expected<void> match_transfers(const ExecPlan& exec, std::vector<TransferSite>& sites, Links& links);
// Per tag, one instruction on every member of the group, all blocking collectives or all starts,
// agreeing on kind and group (starts: also on the number and boxes of their buffers); fills the links,
// the waits' included.
Expected<void> match_collectives(const ExecPlan& exec, std::vector<CollectiveSite>& sites,
                                 const std::vector<CollectiveSite>& waits, Links& links);

// Devices sharing asynchronous collectives start them in one relative order (check_start_order.cc).
Expected<void> check_start_order(const ExecPlan& exec);

// Simulates execution of a structurally valid plan; a deadlock is reported as its wait-for cycle.
Expected<void> check_progress(const ExecPlan& exec, const Links& links);

// Boxes compared as sets of indices, so ranges written with different stops (0:7:4 and 0:5:4) agree;
// pieces compared so too.
bool same_box(const std::vector<plan::IndexRange>& a, const std::vector<plan::IndexRange>& b);
bool same_piece(const plan::SubTensor& a, const plan::SubTensor& b);

// "device 0, instruction 3 (free b2)": the place an error is about.
std::string site_to_text(const ExecPlan& exec, int device, std::size_t index);
std::string site_to_text(const ExecPlan& exec, const Links& links, std::uint32_t global);

}  // namespace loom::exec::detail
