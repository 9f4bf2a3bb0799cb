// Private to materialization: the general fallback (DESIGN.md: "slice, send/recv, concat and sum").
#pragma once

#include <span>

#include "program_builder.h"

namespace loom::exec::detail {

// Makes `target` available on `device` from `sources`, pieces of the same tensor whose distinct
// (box, value) labels partition it (a producing op's parts; replicas repeat a label): one replica of
// every label meeting the target's box is sliced where it lies, sent, and the received parts are
// combined. The nearest replica is used (the device itself, else the closest device number, which
// keeps transfers inside a node). The target's value is whole or a fraction of it (combine's rule).
BufferId fetch(ProgramBuilder& builder, int device, const plan::SubTensor& target, std::span<const BufferId> sources,
               const std::string& rule);

}  // namespace loom::exec::detail
