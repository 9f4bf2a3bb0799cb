#include "loom/sim/timeline_sample.h"

#include <algorithm>
#include <cmath>

namespace loom::sim {
namespace {

// One pass at window width `width`: long spans alone, runs of short ones merged per window (and per
// group when `by_group`).
std::vector<TimelineBox> merge(std::span<const Span> spans, double width, bool by_group) {
  std::vector<TimelineBox> boxes;
  bool open = false;  // the last box collects short spans of window `window` and group `group`
  double window = -1;
  int group = -1;     // -1: none yet (the box holds only spans of any group)
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const Span& s = spans[i];
    if (s.end - s.start >= width) {
      boxes.push_back({i, i + 1, s.start, s.end});
      open = false;
      continue;
    }
    const double w = std::floor(s.start / width);
    if (open && w == window && (!by_group || s.group < 0 || group < 0 || s.group == group)) {
      boxes.back().last = i + 1;
      boxes.back().end = std::max(boxes.back().end, s.end);
      if (group < 0) group = s.group;
      continue;
    }
    boxes.push_back({i, i + 1, s.start, s.end});
    open = true;
    window = w;
    group = s.group;
  }
  return boxes;
}

}  // namespace

std::vector<TimelineBox> sample_row(std::span<const Span> spans, double step, std::size_t budget) {
  budget = std::max<std::size_t>(budget, 1);
  if (spans.size() <= budget) return merge(spans, 0, true);  // width 0: every span is "long", kept alone
  // A row that does not overlap itself has at most `windows` long spans, each splitting at most one
  // window's run: about 3 boxes per window, more where groups alternate within a window.
  for (const bool by_group : {true, false}) {
    for (std::size_t windows = std::max<std::size_t>(budget / 3, 1);; windows /= 2) {
      std::vector<TimelineBox> boxes = merge(spans, (step > 0 ? step : 1) / static_cast<double>(windows), by_group);
      if (boxes.size() <= budget) return boxes;
      if (windows == 1) break;
    }
  }
  // Only rows of overlapping spans longer than the step's half get here: one box for the row.
  double end = 0;
  for (const Span& s : spans) end = std::max(end, s.end);
  return {{0, spans.size(), spans.front().start, end}};
}

}  // namespace loom::sim
