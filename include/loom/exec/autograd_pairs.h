// Forward/backward collective pairs (DESIGN.md, "Materialization": forward/backward pairs fuse into
// autograd-paired collectives). The ExecPlan holds both passes explicitly; pairing says which backward
// collective is the adjoint of which forward one, so code generation can emit each pair as one autograd
// function (e.g. Megatron's sequence-parallel all-gather whose backward is the reduce-scatter).
#pragma once

#include <optional>

#include "loom/exec/exec_plan.h"

namespace loom::exec {

// The adjoint of a collective: all-gather <-> reduce-scatter, all-to-all <-> all-to-all. An all-reduce's
// adjoint is the identity (nullopt), and so is the identity's: Megatron's f and g operators.
std::optional<comm::Primitive> adjoint(comm::Primitive kind);

// Sets CollectiveInfo::paired for every forward collective of a tensor T and a backward collective of a
// gradient of T over the same group whose kinds are adjoint, pairing them in program order. Returns the
// number of pairs.
int pair_autograd_collectives(ExecPlan& exec);

}  // namespace loom::exec
