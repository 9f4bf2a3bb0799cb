// Private to simulate (simulator.h, "Shared links"): collectives of a device's streams (the communication
// stream's and the two start streams') that cross the same kind of link at once share it. A pass of the
// simulator records when each collective ran on each simulated device and which links it crossed
// (Durations::links); the next pass slows each collective to 1/(1 + k) of its speed while k collectives
// of the device's other streams, as the last pass placed them, cross a link of the same kind. Passes
// repeat until the spans repeat: that fixed point is processor sharing of the link (k + 1 collectives in
// flight on it each progress at 1/(k + 1) of their speed), which one pass cannot give, since the worklist
// resolves instructions in dependency order, not in time order, so the collective priced first could not
// be slowed by one priced after it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::sim::detail {

// One collective's run on one device, and the links it crosses (Durations::links' bits).
struct LinkSpan {
  double start = 0;
  double end = 0;
  std::uint8_t links = 0;
};

// The streams whose collectives share links (simulator.h): the communication stream (blocking
// collectives), the activations' starts and the parameters' starts.
enum class LinkStream : std::uint8_t { communication = 0, activations = 1, parameters = 2 };
constexpr std::size_t kLinkStreams = 3;

// By slot (a simulated device), by stream: the spans of the collectives that cross some link, in the
// stream's order (an in-order stream: sorted and disjoint).
struct LinkSpans {
  std::vector<std::array<std::vector<LinkSpan>, kLinkStreams>> by_slot;

  const std::vector<LinkSpan>* of(std::size_t slot, LinkStream stream) const {
    return slot < by_slot.size() ? &by_slot[slot][static_cast<std::size_t>(stream)] : nullptr;
  }
  // Whether collectives of two streams overlap on a link of the same kind somewhere: only then can a
  // pass price differently from the one before.
  bool shared_at_once() const;
  // Every span within `tolerance` seconds of `other`'s (the passes' fixed point).
  bool same_as(const LinkSpans& other, double tolerance) const;
};

// The most passes a simulation runs to reach the fixed point; at that count it keeps the last pass.
constexpr int kMaxLinkPasses = 16;
// Spans this close (seconds) repeat. Where each stream's end moves with the other's the passes close the
// gap by half each, so a nanosecond takes ~20 passes from a millisecond; most plans repeat exactly in 3-4.
constexpr double kLinkSpanTolerance = 1e-9;

}  // namespace loom::sim::detail
