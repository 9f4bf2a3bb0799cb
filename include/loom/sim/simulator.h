// Discrete-event simulation of an ExecPlan (DESIGN.md, "Cost model and simulator"): predicts a step's
// time and where each device spends it, from durations the caller supplies (a cost model, durations.h;
// a profile; or fixed numbers in tests). Times are in seconds.
//
// Each device has these in-order streams:
//   compute        computes and locals (slice, scale, combine), in program order; it also issues each
//                  collective and start where the program has it, holds at a blocking collective until
//                  the collective ends, and at a wait until its start ends (exec_plan.h);
//   communication  collectives, sends and recvs, in program order;
//   starts         the starts, in program order, beside the communication stream, on two streams: the
//                  parameters' and their gradients' (buckets, ZeRO's prefetched gathers and
//                  reduce-scatters) and the activations' (Oases' tensor-parallel sums and their chains).
//                  As PyTorch runs each process group's collectives on that communicator's own stream
//                  (DDP's reducer and DeepSpeed's prefetch on the data-parallel group's, Megatron's
//                  tensor-parallel sums on the tensor-parallel group's), a bucket or a prefetched gather
//                  holds back neither the pipeline's transfers nor the tensor-parallel collectives, and a
//                  tensor-parallel start does not queue behind a bucket (their events are the
//                  communication stream's; its busy time is the union; links they share are not charged);
//   host           the optimizer steps an offload runs on the device's host CPU (exec/passes.h,
//                  offload_to_host), in program order, priced by Durations::host_compute;
//   pcie           the copies between GPU and host memory, in program order, priced by Durations::copy
//                  (its events count as communication: they overlap the GPU's compute).
// An instruction starts when its stream is free and every buffer it reads is ready (written by an
// earlier instruction, on either stream). Loads are resident data: their buffers are ready at time 0 and
// they occupy no stream; frees take no time. A collective or start starts when every member has reached
// it (issued by its compute stream, its communication stream free and its inputs ready) and all members
// finish together; a start is priced as the blocking collective of its kind over all its inputs at once
// (Durations::collective's bytes: the largest member's sum of inputs). A send is issued when
// the sender's stream is free and its buffer ready, and holds the sender's communication stream for the
// p2p time (the sender's compute goes on); the matching recv completes at
// max(send issue, recv issue) + p2p time. Communication overlaps compute wherever the data allows; with
// Durations::contention = f > 1 it progresses at 1/f of its speed while its device computes (a
// collective ends when its slowest member's transfer does).
//
// Since each stream runs its instructions in a fixed order, every start time is the maximum of the times
// it waits for, so the simulation resolves instructions as their inputs become known (a worklist over the
// streams, each instruction visited once): exact, deterministic and linear in the instruction count.
//
// Symmetric devices are simulated once (DESIGN.md, "ExecPlan"). When exec.class_of and representatives
// are filled (exec::assign_device_classes), only each class's representative program runs: a
// collective's member is taken to arrive when its class representative reaches the member's position
// in its own program, and a recv's sender to issue when the sender's representative reaches the send's
// position. This is exact when the classes are a true symmetry of the timing, which symmetry.h checks:
// on the programs' structure before, and on the representatives' times after (linear, without
// simulating the other devices). If either check fails, every device is simulated and
// SimResult::symmetry_fallback says why. The checks cannot see inside Durations::compute and ::local:
// they must give equal times for equal ops on equal buffer sizes on every device of a class, as
// model_durations (durations.h) does. A hook that depends on the device itself needs
// SimOptions::use_device_classes = false.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"
#include "loom/exec/fold.h"
#include "loom/exec/instruction_buffers.h"

namespace loom::sim {

struct Durations {
  // A sub-op's time on `device`. Required.
  std::function<double(const plan::SubOp&, int device)> compute;
  // A collective's time; `bytes` is the largest member's input buffer. Required when the plan has one.
  // A start comes as a Collective of its kind, group and tag (its input and output when it has one
  // each, else kNoBuffer), `bytes` the largest member's inputs together.
  std::function<double(const exec::Collective&, std::int64_t bytes)> collective;
  // A point-to-point transfer's time. Required when the plan has sends.
  std::function<double(int src, int dst, std::int64_t bytes)> p2p;
  // A local (slice, scale, combine) on the compute stream; `bytes` is its output buffer's. Optional: 0.
  std::function<double(const exec::Local&, std::int64_t bytes)> local;
  // An optimizer step on `device`'s host CPU (an offloaded step). Required when the plan has one.
  std::function<double(const plan::SubOp&, int device)> host_compute;
  // A copy of `bytes` between `device`'s GPU and host memory (over its PCIe link). Required when the
  // plan has one.
  std::function<double(std::int64_t bytes, int device)> copy;
  // Communication overlapping compute on its device takes this many times longer for the overlap (as
  // measured contention for SMs and memory bandwidth slows NCCL kernels); 1: no slowdown. At least 1.
  double contention = 1;
};

// What Durations::collective is handed for a collective or a start (see there).
exec::Collective priced_collective(const exec::CollectiveCall& call);

struct SimOptions {
  // Simulate one program per device class when exec.class_of is filled and the classes pass the
  // symmetry check (see above); false: always every device.
  bool use_device_classes = true;
};

enum class Stream : std::uint8_t { compute, communication, host, pcie };
enum class EventKind : std::uint8_t { compute, local, collective, send, recv, copy };
std::string_view name(Stream stream);    // "compute", "communication", "host", "pcie"
std::string_view name(EventKind kind);   // "compute", "local", "collective", "send", "recv", "copy"

// One instruction's run on one device's stream.
struct Event {
  int device = 0;
  Stream stream = Stream::compute;
  EventKind kind = EventKind::compute;
  std::string name;      // the sub-op's name, collective_label(), "send -> 1 #6", "recv <- 0 #6", "slice"
  double start = 0;
  double end = 0;
  int instruction = 0;   // position in the device's program

  bool operator==(const Event&) const = default;
};

struct DeviceTime {
  double compute = 0;        // busy time of the compute stream
  double communication = 0;  // busy time of the communication stream (starts included)
  double exposed_communication = 0;  // communication time during which no compute runs
  double host = 0;           // busy time of the host stream (offloaded optimizer steps)
  double idle = 0;           // step - compute - exposed communication - host: the bubble

  bool operator==(const DeviceTime&) const = default;
};

struct SimResult {
  double step_time = 0;              // makespan: the last event's end (0 for an empty plan)
  std::vector<DeviceTime> devices;   // by device (a device of a class simulated once: its representative's)
  std::vector<Event> events;         // of the simulated devices, by device, then stream, then start time;
                                     // zero-length locals left out
  std::vector<int> simulated_devices;  // ascending: every device, or one per device class
  std::vector<int> represented_by;     // by device: the simulated device whose times it has (itself if simulated)
  std::string symmetry_fallback;       // why a plan with device classes ran in full; empty otherwise

  bool symmetric() const { return simulated_devices.size() < devices.size(); }

  // Over all devices: idle / (devices * step); 0 for an empty plan.
  double idle_fraction() const;
};

// Errors: a missing duration hook the plan needs, a negative or non-finite duration (naming the
// instruction), a contention below 1, a collective or recv without its counterpart, a deadlock (naming
// the stuck devices and what each waits in; check_exec_plan rules these out for materialized plans).
Expected<SimResult> simulate(const exec::ExecPlan& exec, const Durations& durations, SimOptions options = {});

// A folded step (exec/fold.h): its class representatives, always one program per class (symmetric by
// construction); a collective's member arrives when its representative reaches the collective.
Expected<SimResult> simulate(const exec::FoldedStep& folded, const Durations& durations);

}  // namespace loom::sim
