#include "loom/core/error.h"

namespace loom {

std::string Error::to_string() const {
  if (hint.empty()) return message;
  return fmt::format("{} (hint: {})", message, hint);
}

Error with_context(Error error, std::string_view context) {
  // A message that already opens with the context ("policy 'megatron': ..." under "policy 'megatron'",
  // "model 'swin-1.8b' ..." under "model") would only say it twice.
  const std::string_view message = error.message;
  const bool said = message.starts_with(context) &&
                    (message.size() == context.size() || message[context.size()] == ':' ||
                     message[context.size()] == ' ');
  if (!said) error.message = fmt::format("{}: {}", context, error.message);
  return error;
}

}  // namespace loom
