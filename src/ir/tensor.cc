#include "loom/ir/tensor.h"

#include <array>

namespace loom::ir {
namespace {
constexpr std::array<std::string_view, 6> kRoleNames = {"input",    "parameter",       "activation",
                                                         "gradient", "optimizer_state", "buffer"};
}

std::string_view name(TensorRole role) { return kRoleNames[static_cast<std::size_t>(role)]; }

Expected<TensorRole> parse_tensor_role(std::string_view text) {
  for (std::size_t i = 0; i < kRoleNames.size(); ++i)
    if (kRoleNames[i] == text) return static_cast<TensorRole>(i);
  return fail(fmt::format("unknown tensor role '{}'", text),
              "use input, parameter, activation, gradient, optimizer_state or buffer");
}

}  // namespace loom::ir
