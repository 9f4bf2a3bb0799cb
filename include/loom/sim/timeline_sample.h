// The events a drawn timeline row keeps when it has more than its budget (html_report.h): the step is cut
// into equal windows; an event at least a window long is kept whole, and consecutive shorter events of one
// group (the report's event kind: forward, backward, optimizer, ...) that start in one window become one
// box ("k events") spanning them. Every event lies inside the box that holds it, so every part of the step
// a row is busy in shows, and every kind in it, at any budget; the window is widened (halved in count)
// until the boxes fit the budget, merging across groups only when no window width fits. Forward passes of a 64-GPU step are many
// short events: drawing only the longest events of the step left them out.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace loom::sim {

struct Span {
  double start = 0;
  double end = 0;
  int group = 0;  // spans merge with their own group first; -1: with any (gradient sums between backward ops)
};

// Events [first, last) of the row, merged into one box over [start, end] (one event: itself).
struct TimelineBox {
  std::size_t first = 0;
  std::size_t last = 0;
  double start = 0;
  double end = 0;

  std::size_t count() const { return last - first; }
};

// `spans` by start ascending, within [0, step]; budget >= 1. At most `budget` boxes, in order, covering
// every span exactly once; every span kept alone when they fit.
std::vector<TimelineBox> sample_row(std::span<const Span> spans, double step, std::size_t budget);

}  // namespace loom::sim
