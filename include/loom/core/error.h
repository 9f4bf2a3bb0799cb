// Recoverable errors are values: every fallible function returns Expected<T>.
// An Error names the input and the place, and says how to fix it (DESIGN.md, engineering rules).
#pragma once

#include <expected>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace loom {

struct Error {
  std::string message;  // what is wrong, naming the input and the place
  std::string hint;     // how to fix it; may be empty

  // "message (hint: ...)" on one line.
  std::string to_string() const;
  bool operator==(const Error&) const = default;
};

template <class T>
using Expected = std::expected<T, Error>;

inline std::unexpected<Error> fail(std::string message, std::string hint = {}) {
  return std::unexpected<Error>(Error{std::move(message), std::move(hint)});
}

template <class... Args>
std::unexpected<Error> failf(fmt::format_string<Args...> format, Args&&... args) {
  return fail(fmt::format(format, std::forward<Args>(args)...));
}

// Prefixes the message with where it happened, e.g. "in op 'h0.attn' (#12): ", unless the message already
// opens with those words.
Error with_context(Error error, std::string_view context);

template <class T>
Expected<T> with_context(Expected<T> result, std::string_view context) {
  if (!result) return std::unexpected(with_context(std::move(result).error(), context));
  return result;
}

}  // namespace loom

#define LOOM_CONCAT_INNER_(a, b) a##b
#define LOOM_CONCAT_(a, b) LOOM_CONCAT_INNER_(a, b)

// LOOM_ASSIGN_OR_RETURN(auto x, f());  propagates f's error, else binds its value.
#define LOOM_ASSIGN_OR_RETURN(lhs, expr) \
  LOOM_ASSIGN_OR_RETURN_IMPL_(LOOM_CONCAT_(loom_result_, __LINE__), lhs, expr)
#define LOOM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)                 \
  auto tmp = (expr);                                               \
  if (!tmp) return std::unexpected(std::move(tmp).error());        \
  lhs = std::move(*tmp)

// LOOM_RETURN_IF_ERROR(check());  propagates the error of an Expected<void> (or any Expected).
#define LOOM_RETURN_IF_ERROR(expr)                                       \
  do {                                                                   \
    auto loom_status_ = (expr);                                          \
    if (!loom_status_) return std::unexpected(std::move(loom_status_).error()); \
  } while (false)
