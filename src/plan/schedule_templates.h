// The zero-bubble templates behind schedule_blocks (schedule.h), per pipeline device for p devices and
// m micro-batches (both at least 1).
#pragma once

#include <vector>

#include "loom/plan/schedule.h"

namespace loom::plan {

std::vector<std::vector<Block>> zb_h1_blocks(int p, int m);
std::vector<std::vector<Block>> zb_h2_blocks(int p, int m);
std::vector<std::vector<Block>> zb_v_blocks(int p, int m);  // stages 2p, in a V
std::vector<std::vector<Block>> dualpipe_v_blocks(int p, int m);  // stages 2p, in a V; m >= 2p

}  // namespace loom::plan
