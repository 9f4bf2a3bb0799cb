// Exec passes (DESIGN.md, "Data flow"): every decision about communication that materialization leaves
// open is made here, as instructions of the ExecPlan, so that the program codegen prints is the one the
// checker, the interpreter and the simulator saw. They run after materialization and check_exec_plan,
// and the plan is checked again after them.
//
//  exchange_to_all_reduce  an exchange of a tensor's value parts among a group (each member sends its
//      part to the others, receives theirs and combines all n parts into the whole: the layout search's
//      p2p form of a small V->R reduction, or the fallback's) becomes one blocking all-reduce where the
//      combine stood: the same sum, one collective instead of 2(n - 1) transfers and an element-wise
//      combine. Members are matched through the transfers themselves; an exchange some member does not
//      take part in as one is left as written.
//  bucket_gradients  parameter-gradient all-reduces (exchanges of gradient parts included, once the pass
//      above made them all-reduces), per (group, dtype) in the order their gradients become final, fill
//      buckets as torch DDP's reducer does: a bucket takes gradients until it holds bucket_bytes (its
//      group's first bucket: first_bucket_bytes). Each bucket becomes one CollectiveStart placed right
//      after the instruction that finalizes its last gradient, and one CollectiveWait right before the
//      first instruction that reads (or frees) any of its outputs; the gradients' parts are freed after
//      the start. Decided for all devices at once: every member of a group must issue its collectives
//      (buckets, and those left blocking) in one order, as gloo and NCCL match them by order; a group
//      where that fails keeps its reductions blocking.
//  prefetch_gathers  ZeRO-3's parameter all-gathers (a parameter's shards gathered into the piece its
//      readers take: the whole parameter, or its tensor-parallel slice; in the forward and again in the
//      backward) become asynchronous, as DeepSpeed's stage-3 prefetcher fetches the next modules'
//      parameters while the current one computes. Per device, the gathers whose output is first read by
//      one instruction (over one group, of one dtype) form one CollectiveStart of kind all-gather; in the
//      order of their readers, start k is placed as early as its inputs allow but not before the reader
//      of start k - prefetch_depth (nor after the blocking gathers it replaces), and its wait right
//      before its reader. So at most prefetch_depth starts are in flight ahead of the parameters being
//      read, and memory stays bounded: a start's outputs are live from the start (exec_plan.h), which
//      the memory model counts. Decided for all devices at once, as bucket_gradients: a gather is
//      prefetched only where every member of its group prefetches it, and a group whose members would
//      issue their collectives in different orders keeps them blocking.
//  overlap_collectives  (when asked for: Oases' overlapped tensor parallelism, policy/overlap.h) the
//      blocking all-reduces of activations and activation gradients (tensor parallelism's partial sums,
//      forward and backward) become a CollectiveStart right after the compute writing their input and a
//      CollectiveWait right before the first instruction reading (or freeing) their output, where some
//      compute lies between the two: with Oases' sub-batches, the other sub-batch's segment. The start
//      keeps the all-reduce's tag. A hierarchical reduction the layout search made of a partial sum (a
//      reduce-scatter inside a fast sub-group, an all-reduce across, an all-gather inside, each reading
//      the one before) keeps its collectives and starts them all behind the writer, each a chained start
//      reading the one before (exec_plan.h), their waits in chain order before the reader. Decided for
//      all devices at once, as bucket_gradients: a reduction
//      overlaps only where every member of its group overlaps it, and a group whose members would issue
//      their collectives in different orders keeps them blocking.
//  offload_to_host  (when asked for: ZeRO-Offload, Ren et al. ATC '21, DeepSpeed's offload_optimizer /
//      offload_param with device cpu) every optimizer step runs on its device's host CPU: its fp32 master
//      weights and optimizer states are host buffers (loaded there, updated there); the gradient shard
//      it reads moves device-to-host as soon as it is final (after its reduce-scatter or all-reduce, so
//      the copy overlaps the rest of the backward) and its GPU buffer is freed after the copy; the
//      updated 16-bit parameter moves host-to-device right after the step (no delayed update). A step
//      with master weights reads no 16-bit parameter (kNoBuffer, exec_plan.h). With the parameters
//      offloaded too (ZeRO-3), the 16-bit shards are host buffers: each all-gather (blocking or started)
//      reads a host-to-device copy made right before it and freed right after, and the updated shard
//      stays on the host. Rule behind both: an instruction reads buffers of the memory it runs in, and
//      a copy is inserted where it would not (exec_plan.h's copy); a host buffer is never written by the
//      GPU. Runs last, on the buckets and prefetches the passes above made.
//
// A folded step (exec/fold.h) has programs only for class representatives: there bucket_gradients
// buckets the reductions over data-parallel replicas (groups of images of one slice device, which run
// the same program by construction), and the slice gets the passes before it is unfolded.
#pragma once

#include <cstdint>
#include <string_view>

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"
#include "loom/exec/fold.h"

namespace loom::exec {

// What offload_to_host moves to the host: nothing, the optimizer (states, master weights and the step),
// or also the 16-bit parameters (ZeRO-3 only).
enum class Offload : std::uint8_t { none, optimizer, optimizer_and_params };
std::string_view name(Offload offload);             // "none", "optimizer", "optimizer+params"
Expected<Offload> parse_offload(std::string_view text);

struct ExecPassOptions {
  // exchange_to_all_reduce runs when true.
  bool exchanges_to_all_reduce = true;
  // bucket_gradients' cap: DDP's default bucket_cap_mb, 25 MiB. 0 disables bucketing: every gradient
  // reduction stays a blocking collective.
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  // The first bucket of each group (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB): the first
  // gradients of the backward start reducing early.
  std::int64_t first_bucket_bytes = std::int64_t{1} << 20;
  // prefetch_gathers' depth: how many starts of parameter all-gathers may be in flight ahead of the one
  // being read. 1, DeepSpeed-like: the next module's parameters gather while the current one computes.
  // 0 disables prefetching: every parameter all-gather stays blocking.
  int prefetch_depth = 1;
  // overlap_collectives runs when true (the job sets it with --overlap oases).
  bool overlap_collectives = false;
  // offload_to_host runs unless none (the job sets it with --offload).
  Offload offload = Offload::none;
};

// What the passes changed, for reports and tests.
struct ExecPassStats {
  int exchanges = 0;            // exchanges made all-reduces (each counted once, not per member)
  int buckets = 0;              // buckets started (each counted once)
  int bucketed_reductions = 0;  // gradient all-reduces they replace (each counted once)
  int prefetches = 0;           // starts of parameter all-gathers (each counted once)
  int prefetched_gathers = 0;   // blocking parameter all-gathers they replace (each counted once)
  int overlapped = 0;           // activation all-reduces made start/wait (each counted once)
  int host_steps = 0;           // optimizer steps run on the host (every device's)
  int host_copies = 0;          // device-to-host and host-to-device copies (every device's)

  bool operator==(const ExecPassStats&) const = default;
};

// The passes, in the order above, on a plan where every device has its program (check_exec_plan's).
ExecPassStats run_exec_passes(ExecPlan& exec, const ExecPassOptions& options = {});
// The passes of an unfolded step: bucket_gradients over data-parallel replicas (a folded step has no
// ZeRO-3 gathers to prefetch: ZeRO plans are not folded).
ExecPassStats run_exec_passes(FoldedStep& folded, const ExecPassOptions& options = {});

// The passes one by one; each returns what it counts of ExecPassStats.
int exchange_to_all_reduce(ExecPlan& exec);
ExecPassStats bucket_gradients(ExecPlan& exec, const ExecPassOptions& options = {});
ExecPassStats bucket_gradients(FoldedStep& folded, const ExecPassOptions& options = {});
ExecPassStats prefetch_gathers(ExecPlan& exec, const ExecPassOptions& options = {});
// The number of all-reduces it made asynchronous.
int overlap_collectives(ExecPlan& exec);
// Counts host_steps and host_copies. A plan without optimizer steps is left as it is.
ExecPassStats offload_to_host(ExecPlan& exec, Offload offload);

// Whether `instruction` runs on its device's host CPU: a compute writing host buffers (an offloaded step).
bool runs_on_host(const ExecPlan& exec, const Instruction& instruction);
// Whether input `input` of compute `c` is the 16-bit parameter an offloaded step with fp32 master
// weights does not read (its buffer is kNoBuffer; the interpreter gives the kernel zeros of its shape).
bool unread_parameter(const ExecPlan& exec, const Compute& c, std::size_t input);

}  // namespace loom::exec
