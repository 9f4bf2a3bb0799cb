// Independent work items on two cores: Loom's planning box has two, and its per-item loops (slices to
// measure, slice programs to classify) take no locks. Items are split by parity (0, 2, 4, ... on the calling
// thread; 1, 3, 5, ... on a second), so each writes only its own results: the output is the same bytes as
// a serial loop's whatever the timing.
#pragma once

#include <cstddef>
#include <thread>

namespace loom {

// Calls work(i) for every i in [0, n), on the calling thread and one more (none for fewer than two items).
// `work` must not touch another item's state.
template <typename Work>
void for_each_on_both_cores(std::size_t n, const Work& work) {
  const auto every_other = [&](std::size_t from) {
    for (std::size_t i = from; i < n; i += 2) work(i);
  };
  if (n < 2) {
    every_other(0);
    return;
  }
  std::jthread second(every_other, 1);
  every_other(0);
}

}  // namespace loom
