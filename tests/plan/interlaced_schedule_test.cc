// The interlaced pipeline order (plan/interlaced_schedule.h): every block once, the shared blocks in one
// order on every device, and a replay in which a shared block runs only when all devices reach it (it is
// a collective) finishes with every dependency met, over random stage counts, micro-batches and readers.
#include "loom/plan/interlaced_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "loom/plan/schedule_eval.h"

namespace loom::plan {
namespace {

using Sequences = std::vector<std::vector<InterlacedBlock>>;

Sequences blocks(int stages, int micro_batches, std::vector<int> readers) {
  auto made = interlaced_blocks(stages, micro_batches, readers);
  EXPECT_TRUE(made) << made.error().to_string();
  return made.value_or(Sequences{});
}

// Replays the sequences: a stage block runs when its inputs are done (F(s, m) after F(s - 1, m) and, on a
// reader, E(m); B(s, m) after F(s, m) and B(s + 1, m), the last stage's after H(m)); a shared block runs
// when it is next on every device and its inputs are done (E: none; H(m): the last stage's F(m); G(m):
// every reader's B(m)). Returns the blocks left unrun (empty: no deadlock).
std::vector<std::string> replay(const Sequences& seqs, int micro_batches, const std::vector<int>& readers) {
  const auto S = seqs.size();
  const auto M = static_cast<std::size_t>(micro_batches);
  std::vector<std::vector<bool>> f(S, std::vector<bool>(M)), b = f;
  std::vector<bool> e(M), h(M), g(M);
  std::vector<std::size_t> next(S, 0);
  const auto reads = [&](std::size_t s) { return std::ranges::find(readers, static_cast<int>(s)) != readers.end(); };
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t s = 0; s < S; ++s) {
      while (next[s] < seqs[s].size() && seqs[s][next[s]].shared == SharedPart::none) {
        const Block& x = seqs[s][next[s]].block;
        const auto m = static_cast<std::size_t>(x.micro_batch);
        const bool ready = x.part == BlockPart::forward
                               ? (s == 0 || f[s - 1][m]) && (!reads(s) || e[m])
                               : f[s][m] && (s + 1 == S ? h[m] : b[s + 1][m]);
        if (!ready) break;
        (x.part == BlockPart::forward ? f : b)[s][m] = true;
        ++next[s], progress = true;
      }
    }
    // A shared block next on every device.
    if (next[0] == seqs[0].size() || seqs[0][next[0]].shared == SharedPart::none) continue;
    const InterlacedBlock shared = seqs[0][next[0]];
    bool everywhere = true;
    for (std::size_t s = 0; s < S; ++s) everywhere = everywhere && next[s] < seqs[s].size() && seqs[s][next[s]] == shared;
    if (!everywhere) continue;
    const auto m = static_cast<std::size_t>(shared.block.micro_batch);
    bool ready = true;
    if (shared.shared == SharedPart::head) ready = f[S - 1][m];
    if (shared.shared == SharedPart::embed_backward)
      for (std::size_t s = 0; s < S; ++s) ready = ready && (!reads(s) || b[s][m]);
    if (!ready) continue;
    (shared.shared == SharedPart::embed_forward ? e : shared.shared == SharedPart::head ? h : g)[m] = true;
    for (auto& n : next) ++n;
    progress = true;
  }
  std::vector<std::string> left;
  for (std::size_t s = 0; s < S; ++s)
    for (std::size_t i = next[s]; i < seqs[s].size(); ++i) left.push_back(to_string(seqs[s][i]));
  return left;
}

// The stage blocks alone (every shared block dropped), as the schedule evaluator reads them.
std::vector<std::vector<Block>> stage_blocks(const Sequences& seqs) {
  std::vector<std::vector<Block>> out(seqs.size());
  for (std::size_t s = 0; s < seqs.size(); ++s)
    for (const InterlacedBlock& b : seqs[s])
      if (b.shared == SharedPart::none) out[s].push_back(b.block);
  return out;
}

std::vector<InterlacedBlock> shared_blocks(const std::vector<InterlacedBlock>& seq) {
  std::vector<InterlacedBlock> out;
  for (const InterlacedBlock& b : seq)
    if (b.shared != SharedPart::none) out.push_back(b);
  return out;
}

TEST(InterlacedBlocks, T5OnFourStagesInterleavesTheSharedBlocks) {
  // T5 on 4 stages: the encoder's embedding read by stage 0, the decoder's by stage 2.
  const Sequences seqs = blocks(4, 4, {0, 2});
  ASSERT_EQ(seqs.size(), 4U);
  std::string first;
  for (const InterlacedBlock& b : seqs[0]) first += to_string(b) + " ";
  // Shared blocks come at every other step boundary, in phase with the last stage's F(m) (unit step 3 + 2m):
  // stage 0 gets E(m) for the forwards of the next two steps, H(m) once the last stage's F(m) is done, G(m)
  // once stages 0 and 2 are done with m; in steady state each device runs one F and one B between barriers.
  EXPECT_EQ(first, "E0 E1 F0.0 F0.1 E2 E3 F0.2 F0.3 H0 H1 B0.0 H2 G0 B0.1 H3 G1 B0.2 G2 B0.3 G3 ");
  std::string last;
  for (const InterlacedBlock& b : seqs[3]) last += to_string(b) + " ";
  EXPECT_EQ(last, "E0 E1 E2 E3 F3.0 H0 B3.0 F3.1 H1 B3.1 F3.2 H2 G0 B3.2 F3.3 H3 G1 B3.3 G2 G3 ");
  for (const auto& seq : seqs) EXPECT_EQ(shared_blocks(seq), shared_blocks(seqs[0]));
  EXPECT_TRUE(replay(seqs, 4, {0, 2}).empty());
}

TEST(InterlacedBlocks, RandomPipelinesRunEveryBlockOnceWithoutDeadlock) {
  std::mt19937 rng(14);
  for (int trial = 0; trial < 200; ++trial) {
    const int stages = std::uniform_int_distribution<int>(1, 6)(rng);
    const int micro_batches = std::uniform_int_distribution<int>(1, 9)(rng);
    std::vector<int> readers;
    for (int s = 0; s < stages; ++s)
      if (s == 0 || std::bernoulli_distribution(0.3)(rng)) readers.push_back(s);
    SCOPED_TRACE(testing::Message() << stages << " stages, " << micro_batches << " micro-batches, "
                                    << readers.size() << " readers");
    const Sequences seqs = blocks(stages, micro_batches, readers);
    ASSERT_EQ(seqs.size(), static_cast<std::size_t>(stages));
    // The stage blocks are 1F1B's, each once; the evaluator finds no deadlock among them.
    const auto evaluated = evaluate_schedule(stage_blocks(seqs), stages, micro_batches);
    EXPECT_TRUE(evaluated) << evaluated.error().to_string();
    // E, H and G of every micro-batch once per device, in the same order on every device.
    for (const auto& seq : seqs) {
      const auto shared = shared_blocks(seq);
      EXPECT_EQ(shared, shared_blocks(seqs[0]));
      std::set<std::pair<SharedPart, int>> once;
      for (const InterlacedBlock& b : shared) once.insert({b.shared, b.block.micro_batch});
      EXPECT_EQ(once.size(), shared.size());
      EXPECT_EQ(shared.size(), static_cast<std::size_t>(3 * micro_batches));
    }
    const std::vector<std::string> left = replay(seqs, micro_batches, readers);
    EXPECT_TRUE(left.empty()) << "deadlocks at " << (left.empty() ? "" : left.front());
  }
}

TEST(InterlacedBlocks, Errors) {
  EXPECT_FALSE(interlaced_blocks(0, 4, std::vector<int>{}));
  EXPECT_FALSE(interlaced_blocks(2, 0, std::vector<int>{0}));
  const auto outside = interlaced_blocks(2, 2, std::vector<int>{2});
  ASSERT_FALSE(outside);
  EXPECT_NE(outside.error().to_string().find("reader stage 2 is outside [0, 2)"), std::string::npos);
}

}  // namespace
}  // namespace loom::plan
