// Whether a plan's device classes (exec::assign_device_classes) are a true symmetry of its timing, so
// that simulating one program per class gives every device exactly the times the full simulation would
// (simulator.h). Classes compare instruction signatures (ops and shapes); timing also depends on which
// instruction feeds which, on the durations of communication, and on when remote devices send or arrive
// at collectives, none of which device classes look at. Two checks cover them.
//
// Before simulating, symmetry_violation (structure): the classes are well formed (class_of by device,
// each class's representative in it) and every device's program has its representative's length and,
// position by position, the same kind of instruction with
//   compute     the same graph op, and inputs written at the same positions of the program (the same
//               local dependencies);
//   local       the same kind and input positions;
//   collective  (or start) the same kind, group size, buffer sizes and input positions, and the
//               same Durations::collective time;
//   wait        nothing (its start is compared);
//   send        the same bytes and input position, and the same Durations::p2p time;
//   recv        the same bytes, a matching send, and the same Durations::p2p time;
//   load, free  nothing (they take no time).
// After simulating the representatives (simulator_represented.cc, on the times): every collective of a device not
// simulated starts (and, under contention, ends) when its representative's does, its members' arrivals
// read from their representatives; and every recv's sender, read from its representative, issues when
// the representative's sender does. Then the representatives' times, given to their classes, satisfy
// every equation of the full simulation, whose solution is unique for a plan that does not deadlock
// (check_exec_plan): they are the full simulation's times. This accepts classes that are not a symmetry
// of the program but are one of the timing (tensor-parallel peers receiving from different classes that
// send at the same moment). Left to device classes, and not checked again (reading every buffer of
// every program would double the check's cost): that computes and locals of a class have equal buffer
// sizes, which their signatures compare. The one assumption: Durations::compute and Durations::local
// give equal times for equal ops on equal buffer sizes on every device of a class. Cost: one pass over
// every program, without simulating them.
#pragma once

#include <string>

#include "loom/exec/exec_plan.h"
#include "loom/sim/comm_index.h"
#include "loom/sim/simulator.h"

namespace loom::sim {

// The structural check: empty when the classes pass; else the first violation found, naming the device
// and the instruction.
// A plan without classes (class_of empty) gets "the plan has no device classes".
std::string symmetry_violation(const exec::ExecPlan& exec, const CommIndex& index, const Durations& durations);

}  // namespace loom::sim
