// DualPipeV (DeepSeek-V3's DualPipe cut in half to a V; the order of deepseek-ai/DualPipe,
// dualpipe/dualpipev.py, DualPipeV.step), generated for any p devices and m >= 2p micro-batches.
#include <deque>

#include "schedule_templates.h"

namespace loom::plan {
namespace {

// One device's sequence: the reference's eight phases, each block of a chunk taking that chunk's next
// micro-batch. A backward either defers its W to a queue (the reference's WeightGradStore with zero
// bubble enabled), which a later W slot pops oldest first, or runs its W right after it (the reference
// computes the whole backward there).
class DeviceSequence {
 public:
  DeviceSequence(int d, int p) : stage_{d, 2 * p - 1 - d} {}

  void forward(int chunk) { blocks_.push_back({stage_[chunk], next_forward_[chunk]++, BlockPart::forward}); }
  void backward(int chunk, bool defer_weight) {
    const Block b{stage_[chunk], next_backward_[chunk]++, BlockPart::backward};
    blocks_.push_back(b);
    const Block w{b.stage, b.micro_batch, BlockPart::weight};
    if (defer_weight) deferred_.push_back(w);
    else blocks_.push_back(w);
  }
  void weight() {
    blocks_.push_back(deferred_.front());
    deferred_.pop_front();
  }
  // A pair: the forward of one chunk, then the backward of the other with its W (the reference
  // overlaps the two when the module provides overlapped_forward_backward; Loom runs them in turn).
  void forward_backward(int forward_chunk, int backward_chunk) {
    forward(forward_chunk);
    backward(backward_chunk, false);
  }
  std::vector<Block> take() { return std::move(blocks_); }

 private:
  int stage_[2];
  int next_forward_[2] = {0, 0}, next_backward_[2] = {0, 0};
  std::deque<Block> deferred_;
  std::vector<Block> blocks_;
};

std::vector<Block> dualpipe_v_sequence(int d, int p, int m) {
  DeviceSequence seq(d, p);
  const int before = p - d - 1;  // devices below d (towards the turn of the V)
  for (int i = 0; i < 2 * before; ++i) seq.forward(0);  // 1: chunk-0 warm-up
  for (int i = 0; i <= d; ++i) seq.forward(0), seq.forward(1);  // 2: both chunks
  for (int i = 0; i < before; ++i) seq.backward(1, true), seq.weight(), seq.forward(1);  // 3: B1 W F1
  for (int i = 0; i < m - 2 * p + d + 1; ++i) seq.forward_backward(0, 1), seq.forward_backward(1, 0);  // 4: steady
  for (int i = 0; i < before; ++i) seq.backward(1, false), seq.forward_backward(1, 0);  // 5: B1, F1 B0
  // 6: B1 B0, the second half of these backwards deferring their W's (odd devices from a B1, even from a B0).
  bool defer = false;
  for (int i = 0; i <= d; ++i) {
    if (i == (d + 1) / 2 && d % 2 == 1) defer = true;
    seq.backward(1, defer);
    if (i == (d + 1) / 2 && d % 2 == 0) defer = true;
    seq.backward(0, defer);
  }
  for (int i = 0; i < before; ++i) seq.weight(), seq.backward(0, true);  // 7: W B0
  for (int i = 0; i <= d; ++i) seq.weight();  // 8: the W's still owed
  return seq.take();
}

}  // namespace

std::vector<std::vector<Block>> dualpipe_v_blocks(int p, int m) {
  std::vector<std::vector<Block>> result;
  for (int d = 0; d < p; ++d) result.push_back(dualpipe_v_sequence(d, p, m));
  return result;
}

}  // namespace loom::plan
