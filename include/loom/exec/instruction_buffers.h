// The buffers an instruction writes and reads, and the collectives among instructions, for passes that
// follow data through programs (memory accounting, folding, the check, the simulator) without spelling
// out every instruction kind.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <variant>
#include <vector>

#include "loom/exec/exec_plan.h"

namespace loom::exec {

// Calls f(BufferId) for each buffer `instruction` writes: a compute's outputs, the output of a load,
// collective or local, a start's outputs (allocated where it stands, readable after its wait), a recv's
// buffer.
template <class F>
void for_each_written(const Instruction& instruction, F&& f) {
  std::visit(
      [&](const auto& i) {
        using T = std::decay_t<decltype(i)>;
        if constexpr (std::is_same_v<T, Compute> || std::is_same_v<T, CollectiveStart>) {
          for (BufferId b : i.outputs) f(b);
        } else if constexpr (std::is_same_v<T, Load> || std::is_same_v<T, Collective> || std::is_same_v<T, Local>) {
          f(i.output);
        } else if constexpr (std::is_same_v<T, Recv>) {
          f(i.buffer);
        }
      },
      instruction);
}

// Calls f(BufferId) for each buffer `instruction` reads: a compute's, local's or start's inputs
// (shape-only inputs, kNoBuffer, left out), a collective's input, a send's buffer. A wait reads nothing.
// On a non-const instruction f may take a BufferId& and redirect the read (a pass inserting a copy).
template <class I, class F>
  requires std::is_same_v<std::remove_const_t<I>, Instruction>
void for_each_read(I& instruction, F&& f) {
  std::visit(
      [&](auto& i) {
        using T = std::decay_t<decltype(i)>;
        if constexpr (std::is_same_v<T, Compute> || std::is_same_v<T, Local> || std::is_same_v<T, CollectiveStart>) {
          for (auto& b : i.inputs)
            if (b.valid()) f(b);
        } else if constexpr (std::is_same_v<T, Collective>) {
          f(i.input);
        } else if constexpr (std::is_same_v<T, Send>) {
          f(i.buffer);
        }
      },
      instruction);
}

// A blocking collective or a start, seen alike where only the members, the tag and the buffers matter:
// a blocking collective moves one input into one output, a start a bucket of them. Views into the
// instruction, which must outlive it.
struct CollectiveCall {
  comm::Primitive kind = comm::Primitive::all_reduce;
  std::span<const int> group;
  std::int64_t tag = 0;
  std::span<const BufferId> inputs, outputs;  // aligned
  bool asynchronous = false;                  // a start
};

inline std::optional<CollectiveCall> collective_call(const Instruction& instruction) {
  if (const auto* c = std::get_if<Collective>(&instruction))
    return CollectiveCall{c->kind, c->group, c->tag, std::span(&c->input, 1), std::span(&c->output, 1), false};
  if (const auto* s = std::get_if<CollectiveStart>(&instruction))
    return CollectiveCall{s->kind, s->group, s->tag, s->inputs, s->outputs, true};
  return std::nullopt;
}

inline bool is_collective_call(const Instruction& instruction) {
  return std::holds_alternative<Collective>(instruction) || std::holds_alternative<CollectiveStart>(instruction);
}

}  // namespace loom::exec
