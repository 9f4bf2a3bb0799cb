// The interlaced pipeline order (plan/interlaced_schedule.h): 1F1B run step by step on unit costs, the
// shared blocks inserted at step boundaries in one order for every device.
#include <fmt/format.h>

#include <algorithm>
#include <ranges>

#include "loom/plan/interlaced_schedule.h"

namespace loom::plan {
namespace {

// Per (stage, micro-batch): whether its F and B are done.
struct Progress {
  std::vector<std::vector<bool>> forward, backward;
  std::vector<bool> embedded, headed, embed_done;  // E, H, G per micro-batch

  Progress(int stages, int micro_batches)
      : forward(static_cast<std::size_t>(stages), std::vector<bool>(static_cast<std::size_t>(micro_batches))),
        backward(forward),
        embedded(static_cast<std::size_t>(micro_batches)),
        headed(embedded),
        embed_done(embedded) {}
};

}  // namespace

std::string to_string(const InterlacedBlock& block) {
  switch (block.shared) {
    case SharedPart::embed_forward: return fmt::format("E{}", block.block.micro_batch);
    case SharedPart::head: return fmt::format("H{}", block.block.micro_batch);
    case SharedPart::embed_backward: return fmt::format("G{}", block.block.micro_batch);
    case SharedPart::none: break;
  }
  return fmt::format("{}{}.{}", part_letter(block.block.part), block.block.stage, block.block.micro_batch);
}

Expected<std::vector<std::vector<InterlacedBlock>>> interlaced_blocks(int stages, int micro_batches,
                                                                      std::span<const int> embedding_readers) {
  if (stages < 1 || micro_batches < 1)
    return fail(fmt::format("interlaced schedule: {} stages and {} micro-batches; each must be at least 1", stages,
                            micro_batches));
  std::vector<bool> reads(static_cast<std::size_t>(stages));
  for (int s : embedding_readers) {
    if (s < 0 || s >= stages)
      return fail(fmt::format("interlaced schedule: embedding reader stage {} is outside [0, {})", s, stages));
    reads[static_cast<std::size_t>(s)] = true;
  }
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::vector<Block>> pipeline,
                        schedule_blocks({.kind = ScheduleKind::one_f_one_b}, stages, micro_batches));
  const auto S = static_cast<std::size_t>(stages);
  const auto M = static_cast<std::size_t>(micro_batches);
  const std::size_t last = S - 1;
  Progress done(stages, micro_batches);
  std::vector<std::vector<InterlacedBlock>> out(S);
  std::vector<std::size_t> next(S, 0);
  const auto shared = [&](SharedPart part, std::size_t m) {
    for (auto& seq : out) seq.push_back({.shared = part, .block = {.micro_batch = static_cast<int>(m)}});
  };
  const auto ready = [&](std::size_t s, const Block& b) {
    const auto m = static_cast<std::size_t>(b.micro_batch);
    if (b.part == BlockPart::forward)
      return (s == 0 || done.forward[s - 1][m]) && (!reads[s] || done.embedded[m]);
    return done.forward[s][m] && (s == last ? done.headed[m] : done.backward[s + 1][m]);
  };
  // Shared blocks run only at every other boundary, in phase with the last stage's steady F(m) B(m) pairs
  // (its F(m) at step p - 1 + 2m): between two such barriers each device runs at most two stage blocks, in
  // steady state one F and one B, so on real costs the barrier adds no wait beyond 1F1B's own (a barrier
  // at every boundary would make each step cost the slowest block, a B, twice per micro-batch).
  int idle = 0;
  for (int t = 0;; ++t) {
    const bool finished = std::ranges::all_of(
        std::views::iota(std::size_t{0}, S), [&](std::size_t s) { return next[s] == pipeline[s].size(); });
    if (finished && std::ranges::all_of(done.embed_done, [](bool d) { return d; })) break;
    const std::size_t before = out.front().size();
    if (t % 2 == stages % 2 || t == 0 || finished) {
      // H and G as soon as their inputs are done (they free activations and unblock the last stage's B), E
      // for the F a reader runs in the two steps to come.
      for (std::size_t m = 0; m < M; ++m)
        if (!done.headed[m] && done.forward[last][m]) shared(SharedPart::head, m), done.headed[m] = true;
      for (std::size_t m = 0; m < M; ++m) {
        bool all = !done.embed_done[m];
        for (std::size_t s = 0; s < S && all; ++s) all = !reads[s] || done.backward[s][m];
        if (all) shared(SharedPart::embed_backward, m), done.embed_done[m] = true;
      }
      for (std::size_t s = 0; s < S; ++s)
        for (std::size_t i = next[s]; reads[s] && i < std::min(next[s] + 2, pipeline[s].size()); ++i) {
          const Block& b = pipeline[s][i];
          if (b.part != BlockPart::forward) continue;
          for (std::size_t e = 0; e <= static_cast<std::size_t>(b.micro_batch); ++e)  // in micro-batch order
            if (!done.embedded[e]) shared(SharedPart::embed_forward, e), done.embedded[e] = true;
        }
    }
    // One step: every device whose next stage block is ready runs it; its results count from the next step.
    std::vector<std::pair<std::size_t, Block>> ran;
    for (std::size_t s = 0; s < S; ++s)
      if (next[s] < pipeline[s].size() && ready(s, pipeline[s][next[s]])) {
        const Block& b = pipeline[s][next[s]++];
        out[s].push_back({.block = b});
        ran.emplace_back(s, b);
      }
    for (const auto& [s, b] : ran)
      (b.part == BlockPart::forward ? done.forward : done.backward)[s][static_cast<std::size_t>(b.micro_batch)] = true;
    // Two steps without a block or a barrier's shared block: nothing can become ready.
    idle = ran.empty() && out.front().size() == before ? idle + 1 : 0;
    if (idle > 2)
      return fail(fmt::format("interlaced schedule: {} stages x {} micro-batches stalls (no stage block is ready)",
                              stages, micro_batches));
  }
  return out;
}

}  // namespace loom::plan
