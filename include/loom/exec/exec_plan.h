// ExecPlan (DESIGN.md, "ExecPlan"): one ordered instruction list per device, produced from a validated
// Plan by materialization (materialize.h). Data lives in buffers: each buffer is one SubTensor (a box
// and a value part of a FullTensor) held by one device, written once, by exactly one instruction.
//
// A buffer labelled "value part k of n" holds one of n parts that sum to the whole; which of a group's
// parts a device holds is a name, not a fixed decomposition, so consumers may read any member of a
// complete decomposition. A buffer of a leaf (parameter, input) holds its box of the leaf's value, times
// its value fraction (1/n for a part of n), as the plan interpreter assumes.
//
// Instruction semantics (what the verifying interpreter runs, and what codegen must emit):
//   compute     run a sub-op on its input buffers (aligned with the op's inputs; kNoBuffer for
//               shape-only inputs), writing its output buffers. A compute whose buffers are host
//               buffers runs on the device's host CPU: only an offloaded optimizer step (exec/passes.h,
//               offload_to_host), which reads no 16-bit parameter when it updates fp32 master weights
//               (its parameter input is then kNoBuffer: the update runs on the master copy).
//   load        write a leaf buffer from the leaf's initial value (parameters, data).
//   collective  one member's part of a collective over `group` (devices, in the order of their
//               pieces), matched across members by `tag`. Sum kinds (all-reduce, reduce-scatter):
//               output = the sum of all members' inputs, restricted to the output's box. Gather kinds
//               (all-gather, all-to-all): output = the members' inputs placed by their boxes. Blocking:
//               it holds the device's compute stream from its program position until it ends, as
//               torch's synchronous collectives do (on gloo the host thread runs it; on NCCL the current
//               stream waits for the NCCL stream), so nothing after it in the program runs meanwhile.
//   start       one member's part of an asynchronous collective over several buffers at once (the
//               runtime flattens them into one call), matched across members by `tag`. Kind all-reduce
//               (a gradient bucket): per i, outputs[i] = the sum over members of their inputs[i] (all
//               members' inputs[i] of one box, as for the blocking all-reduce). Kind all-gather (a
//               prefetched parameter): per i, outputs[i] = the members' inputs[i] placed by their boxes
//               (all members' outputs[i] of one box containing every inputs[i], as for the blocking
//               all-gather). Kind reduce-scatter (one link of a hierarchical sum): per i, outputs[i] =
//               the sum over members of their inputs[i] (all members' inputs[i] of one box), restricted
//               to the output's box (inside it), as for the blocking reduce-scatter. It reads its inputs
//               where it stands and writes (allocates) its outputs there, so they are live from the start
//               on, but they may be read only after this device's wait of the same tag; compute runs on
//               between the two. A chained start reads an output of an earlier start of its device whose
//               wait has not come yet (a hierarchical sum's next link: the all-reduce across reads the
//               reduce-scatter's output): it is ordered on the device's start stream, reading its input
//               when the start writing it completes, with no wait on the compute stream in between;
//               that input may be freed only after its own start's wait, as any start's output.
//   wait        the device's compute stream waits until its start of `tag` has completed, which needs
//               every member of the group to have started it (and, for a chained start, the starts it
//               reads to have completed).
//   send/recv   point-to-point: the recv's buffer gets the data of the matching send (same pair of
//               devices and tag) of an equal SubTensor. A send is an isend: the sender goes on at once
//               (the data is buffered); the data of a recv is ready for its readers when it arrives.
//   slice       output = input restricted to a smaller box, same value part.
//   scale       output = input times output fraction / input fraction: a value split (R->V).
//   combine     output = at each element, inputs whose value parts tile the whole, summed and times
//               the output's fraction; failing that, inputs tiling the output's own part, summed as is:
//               concat and sum, the general fallback's assembly. The whole comes first so that every
//               fetched part is the whole times its fraction, one decomposition all consumers share.
//               Failing both, inputs of the output's box that are k distinct parts of one decomposition
//               of k x the output's count, summed as is: the output names their sum as a part of a
//               coarser decomposition (a device's micro-batch partial sums, accumulated before one
//               reduction; the other devices' sums complete that decomposition).
//   accumulate  output = the inputs summed as is, all of the output's box: one step of a device's
//               running sum of its partial sums of one box (a gradient's micro-batch parts, added as
//               they come). The output is labelled as the part the running sum is once its last term
//               is added (a coarser decomposition, as for combine's last rule), so the labels of its
//               inputs, the running sum so far and the next terms, tile nothing.
//   copy        output = input, the same piece, moved between the device's GPU memory and its host
//               memory (D2H when the output is a host buffer, H2D when the input is): ZeRO-Offload's
//               transfers over the GPU's PCIe link, asynchronous (pinned memory) beside the compute.
//   free        the buffer is dead on this device from here on.
//
// Memory: a buffer lives in its device's GPU memory unless it is a host buffer (Memory::host, in the
// pinned memory of the device's node, ZeRO-Offload's optimizer states and offloaded parameters). Only
// copies cross between the two; every other instruction but a host compute touches GPU buffers alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "loom/comm/step.h"
#include "loom/core/strong_id.h"
#include "loom/plan/plan.h"

namespace loom::exec {

struct BufferTag;
using BufferId = StrongId<BufferTag>;
inline constexpr BufferId kNoBuffer{};

enum class Memory : std::uint8_t { gpu, host };
std::string_view name(Memory memory);  // "gpu", "host"

struct Buffer {
  int device = 0;
  plan::SubTensor piece;
  std::int64_t bytes = 0;
  Memory memory = Memory::gpu;  // where on its device the buffer lives (above)
};

struct Compute {
  plan::SubOpId sub_op;
  std::vector<BufferId> inputs;   // aligned with the sub-op's inputs; kNoBuffer for shape-only ones
  std::vector<BufferId> outputs;  // aligned with the sub-op's outputs
};
struct Load {
  BufferId output;
};
struct Collective {
  comm::Primitive kind = comm::Primitive::all_reduce;  // one of comm::is_collective
  std::vector<int> group;                              // every member's device, in piece order
  std::int64_t tag = 0;                                // equal on all members of one collective
  BufferId input;
  BufferId output;
};
// An asynchronous collective's start and its wait (the semantics above). Tags are shared with
// Collective, Send and Recv: a start's tag names no other instruction but its wait.
struct CollectiveStart {
  comm::Primitive kind = comm::Primitive::all_reduce;  // all-reduce, all-gather or reduce-scatter (asynchronous)
  std::vector<int> group;                              // every member's device, in piece order
  std::int64_t tag = 0;                                // equal on all members, and on each member's wait
  std::vector<BufferId> inputs;                        // this member's part of each tensor it moves
  std::vector<BufferId> outputs;                       // aligned with inputs
};
struct CollectiveWait {
  std::int64_t tag = 0;
};
struct Send {
  int peer = 0;
  std::int64_t tag = 0;
  BufferId buffer;
};
struct Recv {
  int peer = 0;
  std::int64_t tag = 0;
  BufferId buffer;
};
enum class LocalKind : std::uint8_t { slice, scale, combine, accumulate, copy };
struct Local {
  LocalKind kind = LocalKind::slice;
  std::vector<BufferId> inputs;  // slice, scale and copy: exactly one
  BufferId output;
};
struct Free {
  BufferId buffer;
};

using Instruction = std::variant<Compute, Load, Collective, Send, Recv, Local, Free, CollectiveStart, CollectiveWait>;

// What each collective tag moved, for reports and the simulator: the tensor it serves and the step
// of the layout search (or the fallback) it came from.
struct CollectiveInfo {
  ir::TensorId tensor;
  std::string rule;  // e.g. "V->R all-reduce"
  // The autograd partner (DESIGN.md: all-gather <-> reduce-scatter, all-to-all <-> all-to-all): the tag of
  // the collective moving this tensor's gradient the opposite way, or of the forward collective whose
  // gradient this moves; -1 when none (an all-reduce pairs with the identity).
  std::int64_t paired = -1;
  // The step this collective is one group of, where the step runs several groups at once (the layout
  // search's multi-group comm::Step, emitted as one collective per group; the steps of the searches
  // that run at once, one per piece of a tensor, joined: exec/concurrent_steps.h, e.g. the dp reductions of
  // a weight's tp pieces; in a folded step each instance of one, and the dp reductions of one gradient's
  // pieces; a bucket or prefetch of such collectives): an index into
  // ExecPlan::group_steps. Those groups run together and share their nodes' NICs, so the simulator prices
  // this collective as the whole step (sim/durations.h): as the layout search priced its own steps, and
  // as one comm::Step of all their groups where steps are joined. -1: it runs alone. A send's step (a
  // joined p2p step) is priced by no one: exchange_to_all_reduce gives it to the all-reduce it makes.
  std::int64_t step = -1;
};

// `groups` as ExecPlan::group_steps keeps them: each ascending, the list sorted.
std::vector<std::vector<int>> canonical_groups(std::vector<std::vector<int>> groups);

struct ExecPlan {
  const plan::Plan* plan = nullptr;  // not owned
  int num_devices = 0;
  std::vector<Buffer> buffers;                      // by BufferId
  std::vector<std::vector<Instruction>> programs;   // by device, in execution order
  std::vector<CollectiveInfo> collectives;          // by tag (tags are 0, 1, ...; sends share the numbering)
  // By CollectiveInfo::step: each multi-group step's groups, each ascending and the list by its first
  // device (the ring visits members in device order, so order is no part of the price); the group of each
  // of the step's collectives is among them. Appended by add_group_step, one entry per distinct list;
  // never edited in place.
  std::vector<std::vector<std::vector<int>>> group_steps;
  // Device classes: devices whose programs are equal up to renaming of devices and buffers share a
  // class; class_of[d] is d's class and representatives[c] the first device of class c.
  std::vector<int> class_of;
  std::vector<int> representatives;

  const Buffer& buffer(BufferId id) const { return buffers[id.index()]; }
  BufferId add_buffer(int device, plan::SubTensor piece, std::int64_t bytes, Memory memory = Memory::gpu) {
    buffers.push_back(Buffer{device, std::move(piece), bytes, memory});
    return BufferId(static_cast<std::uint32_t>(buffers.size() - 1));
  }
  // The step of `groups` (CollectiveInfo::step): the one of an equal canonical list when there is one
  // (every layer's equal step shares it), else a fresh one; -1 for fewer than two groups (nothing to share).
  std::int64_t add_group_step(std::vector<std::vector<int>> groups);
  // A fresh tag (the next number), described by `info`.
  std::int64_t add_tag(CollectiveInfo info) {
    collectives.push_back(std::move(info));
    return static_cast<std::int64_t>(collectives.size() - 1);
  }

 private:
  // group_steps' lists -> their index, for the first indexed_steps_ of them: add_group_step's lookup, which
  // first indexes the lists appended to group_steps since (directly, too). Copies carry it with group_steps.
  std::map<std::vector<std::vector<int>>, std::int64_t> step_of_groups_;
  std::size_t indexed_steps_ = 0;
};

std::string_view name(LocalKind kind);  // "slice", "scale", "combine", "accumulate", "copy"

// The kinds a CollectiveStart may have: all-reduce, all-gather and reduce-scatter.
bool has_asynchronous_form(comm::Primitive kind);

}  // namespace loom::exec
