#include "loom/ir/op.h"

#include <array>

namespace loom::ir {
namespace {
constexpr std::array<std::string_view, 3> kPassNames = {"forward", "backward", "optimizer"};
}

std::string_view name(Pass pass) { return kPassNames[static_cast<std::size_t>(pass)]; }

Expected<Pass> parse_pass(std::string_view text) {
  for (std::size_t i = 0; i < kPassNames.size(); ++i)
    if (kPassNames[i] == text) return static_cast<Pass>(i);
  return fail(fmt::format("unknown pass '{}'", text), "use forward, backward or optimizer");
}

}  // namespace loom::ir
