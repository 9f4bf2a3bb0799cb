// The buffers an instruction writes and reads, for passes that follow data through programs (memory
// accounting, folding) without spelling out every instruction kind.
#pragma once

#include <type_traits>
#include <variant>

#include "loom/exec/exec_plan.h"

namespace loom::exec {

// Calls f(BufferId) for each buffer `instruction` writes: a compute's outputs, the output of a load,
// collective or local, a recv's buffer.
template <class F>
void for_each_written(const Instruction& instruction, F&& f) {
  std::visit(
      [&](const auto& i) {
        using T = std::decay_t<decltype(i)>;
        if constexpr (std::is_same_v<T, Compute>) {
          for (BufferId b : i.outputs) f(b);
        } else if constexpr (std::is_same_v<T, Load> || std::is_same_v<T, Collective> || std::is_same_v<T, Local>) {
          f(i.output);
        } else if constexpr (std::is_same_v<T, Recv>) {
          f(i.buffer);
        }
      },
      instruction);
}

// Calls f(BufferId) for each buffer `instruction` reads: a compute's or local's inputs (shape-only
// inputs, kNoBuffer, left out), a collective's input, a send's buffer.
template <class F>
void for_each_read(const Instruction& instruction, F&& f) {
  std::visit(
      [&](const auto& i) {
        using T = std::decay_t<decltype(i)>;
        if constexpr (std::is_same_v<T, Compute> || std::is_same_v<T, Local>) {
          for (BufferId b : i.inputs)
            if (b.valid()) f(b);
        } else if constexpr (std::is_same_v<T, Collective>) {
          f(i.input);
        } else if constexpr (std::is_same_v<T, Send>) {
          f(i.buffer);
        }
      },
      instruction);
}

}  // namespace loom::exec
