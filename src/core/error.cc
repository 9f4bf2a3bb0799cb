#include "loom/core/error.h"

namespace loom {

std::string Error::to_string() const {
  if (hint.empty()) return message;
  return fmt::format("{} (hint: {})", message, hint);
}

Error with_context(Error error, std::string_view context) {
  error.message = fmt::format("{}: {}", context, error.message);
  return error;
}

}  // namespace loom
