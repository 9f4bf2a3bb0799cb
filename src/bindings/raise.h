// Engine errors in Python: a C++ exception that the module translates into `_loom_engine.PlanError`
// (re-exported as loom.PlanError), carrying the engine's message and hint.
#pragma once

#include <stdexcept>
#include <type_traits>
#include <utility>

#include "loom/core/error.h"

namespace loom::bindings {

struct PlanFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws PlanFailure with "message" and, when there is one, "\nhint: hint" (as `loom` prints them).
[[noreturn]] inline void raise(const Error& error) {
  throw PlanFailure(error.hint.empty() ? error.message : error.message + "\nhint: " + error.hint);
}

// The value of an engine result, or PlanFailure with its error.
template <class T>
T checked(Expected<T> result) {
  if (!result) raise(result.error());
  if constexpr (!std::is_void_v<T>) return std::move(*result);
}

}  // namespace loom::bindings
