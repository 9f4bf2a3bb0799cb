// Strong integer ids into flat vectors (no pointer graphs): a TensorId cannot be passed as an OpId.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <limits>

namespace loom {

template <class Tag>
struct StrongId {
  static constexpr std::uint32_t kInvalid = std::numeric_limits<std::uint32_t>::max();
  std::uint32_t value = kInvalid;

  constexpr StrongId() = default;
  constexpr explicit StrongId(std::uint32_t v) : value(v) {}
  constexpr bool valid() const { return value != kInvalid; }
  constexpr std::size_t index() const { return value; }
  friend constexpr auto operator<=>(StrongId, StrongId) = default;
};

}  // namespace loom

template <class Tag>
struct std::hash<loom::StrongId<Tag>> {
  std::size_t operator()(loom::StrongId<Tag> id) const noexcept { return std::hash<std::uint32_t>{}(id.value); }
};
