// Zero-bubble templates (Qi et al. 2023, §3): generated for any p and m, never tabulated per stage count.
#include <algorithm>
#include <deque>
#include <limits>

#include "schedule_templates.h"

namespace loom::plan {
namespace {

// 1F1B's order of forwards and backwards on stage s: `warm_up` forwards, then a backward and the next
// forward in turn, then the remaining backwards.
std::vector<Block> forward_backward_order(int s, int m, int warm_up) {
  std::vector<Block> seq;
  warm_up = std::min(warm_up, m);
  for (int k = 0; k < warm_up; ++k) seq.push_back({s, k, BlockPart::forward});
  for (int k = 0; k < m; ++k) {
    seq.push_back({s, k, BlockPart::backward});
    if (k + warm_up < m) seq.push_back({s, k + warm_up, BlockPart::forward});
  }
  return seq;
}

// W's placed by a unit-cost simulation (F = B = W = 1): at each step a device runs the next block of its
// 1F1B order (warm_up(s) forwards first) when that block's inputs are ready (F(s, k) after F(s - 1, k);
// B(s, k) after F(s, k) and B(s + 1, k)) and, for a forward, the device holds fewer than `limit`
// micro-batches (from F to W); otherwise the oldest W it owes; otherwise it waits. The W's so fill the
// slots where 1F1B would idle, and no device holds more than `limit`.
template <typename WarmUp>
std::vector<std::vector<Block>> weights_filling_gaps(int p, int m, WarmUp warm_up, int limit) {
  constexpr int kNever = std::numeric_limits<int>::max();
  const auto us = [](int i) { return static_cast<std::size_t>(i); };
  std::vector<std::vector<Block>> order(us(p)), result(us(p));
  for (int s = 0; s < p; ++s) order[us(s)] = forward_backward_order(s, m, warm_up(s));
  // end[part][s][k]: the step after block (s, k, part) ran.
  std::vector<std::vector<std::vector<int>>> end(2, std::vector<std::vector<int>>(us(p), std::vector<int>(us(m), kNever)));
  std::vector<std::size_t> next(us(p), 0);
  std::vector<std::deque<int>> owed(us(p));  // per device: micro-batches whose W is still to run
  std::vector<int> held(us(p), 0);
  std::size_t left = 3 * us(p) * us(m);
  for (int t = 0; left > 0 && t <= 3 * p * (m + p); ++t) {  // bounded: the 1F1B order cannot deadlock
    for (int s = 0; s < p; ++s) {
      std::vector<Block>& seq = result[us(s)];
      const auto ready = [&](const Block& b) {
        if (b.part == BlockPart::forward) return held[us(s)] < limit && (s == 0 || end[0][us(s - 1)][us(b.micro_batch)] <= t);
        return end[0][us(s)][us(b.micro_batch)] <= t && (s == p - 1 || end[1][us(s + 1)][us(b.micro_batch)] <= t);
      };
      if (next[us(s)] < order[us(s)].size() && ready(order[us(s)][next[us(s)]])) {
        const Block b = order[us(s)][next[us(s)]++];
        seq.push_back(b);
        end[b.part == BlockPart::forward ? 0 : 1][us(s)][us(b.micro_batch)] = t + 1;
        if (b.part == BlockPart::forward) ++held[us(s)];
        else owed[us(s)].push_back(b.micro_batch);
      } else if (!owed[us(s)].empty()) {
        seq.push_back({s, owed[us(s)].front(), BlockPart::weight});
        owed[us(s)].pop_front();
        --held[us(s)];
      } else {
        continue;
      }
      --left;
    }
  }
  return result;
}

}  // namespace

// ZB-H1: 1F1B's warm-up (p - s forwards) and peak (p micro-batches).
std::vector<std::vector<Block>> zb_h1_blocks(int p, int m) {
  return weights_filling_gaps(p, m, [p](int s) { return p - s; }, p);
}

// ZB-H2: 2 (p - s) - 1 warm-up forwards, so that stage s's first B arrives as they end, and room for
// 2p - 1 micro-batches: once m >= 2p - 1 the W's fill every gap inside each device's span.
std::vector<std::vector<Block>> zb_h2_blocks(int p, int m) {
  return weights_filling_gaps(p, m, [p](int s) { return 2 * (p - s) - 1; }, 2 * p - 1);
}

// ZB-V by a unit-cost simulation over the V (schedule.h): per step, each free device runs a ready B of
// chunk 0 or chunk 1, else a ready F of chunk 1 or chunk 0 while it holds fewer than 2p chunk
// activations, else its oldest W.
std::vector<std::vector<Block>> zb_v_blocks(int p, int m) {
  constexpr int kNever = std::numeric_limits<int>::max();
  const auto us = [](int i) { return static_cast<std::size_t>(i); };
  const int stages = 2 * p;
  std::vector<std::vector<Block>> result(us(p));
  std::vector<std::vector<int>> end_f(us(stages), std::vector<int>(us(m), kNever)), end_b = end_f;
  std::vector<int> next_f(us(stages), 0), next_b(us(stages), 0), held(us(p), 0);
  std::vector<std::deque<Block>> owed(us(p));
  std::size_t left = 3 * us(stages) * us(m);
  for (int t = 0; left > 0 && t <= 6 * stages * (m + stages); ++t) {  // bounded: the greedy never deadlocks
    for (int d = 0; d < p; ++d) {
      const int chunk0 = d, chunk1 = stages - 1 - d;
      const auto backward_ready = [&](int s) {
        const int k = next_b[us(s)];
        return k < m && end_f[us(s)][us(k)] <= t && (s == stages - 1 || end_b[us(s + 1)][us(k)] <= t);
      };
      const auto forward_ready = [&](int s) {
        const int k = next_f[us(s)];
        return k < m && held[us(d)] < stages && (s == 0 || end_f[us(s - 1)][us(k)] <= t);
      };
      Block b;
      if (backward_ready(chunk0) || backward_ready(chunk1)) {
        const int s = backward_ready(chunk0) ? chunk0 : chunk1;
        b = {s, next_b[us(s)]++, BlockPart::backward};
        end_b[us(s)][us(b.micro_batch)] = t + 1;
        owed[us(d)].push_back({s, b.micro_batch, BlockPart::weight});
      } else if (forward_ready(chunk1) || forward_ready(chunk0)) {
        const int s = forward_ready(chunk1) ? chunk1 : chunk0;
        b = {s, next_f[us(s)]++, BlockPart::forward};
        end_f[us(s)][us(b.micro_batch)] = t + 1;
        ++held[us(d)];
      } else if (!owed[us(d)].empty()) {
        b = owed[us(d)].front();
        owed[us(d)].pop_front();
        --held[us(d)];
      } else {
        continue;
      }
      result[us(d)].push_back(b);
      --left;
    }
  }
  return result;
}

}  // namespace loom::plan
