// Plain p2p (SuperScaler §3.3, the baseline of its Table 3 comparison): every target device fetches
// the region it needs from devices holding it, by send/recv, and sums value parts itself.
//
// Works between any two layouts of the same tensor (any devices, any RVD). What a target device needs:
// its chunk's full value if `to` has V(1); with V(v_t), if v_t divides the source's v_s, part p sums
// the source parts p·(v_s/v_t) .. (p+1)·(v_s/v_t) − 1 of one source replica; otherwise part 0 takes the
// full value and the other parts are zeros. Holders are chosen per (target value group, source chunk):
// a replica containing the target itself first, then one with the most members on the target's node,
// then the least loaded (bytes sent so far), then the lowest replica index, so the plan is deterministic.
#pragma once

#include <string>

#include "loom/cluster/cluster.h"
#include "loom/comm/layout.h"
#include "loom/comm/step.h"

namespace loom::comm {

// Pre: both layouts valid for `tensor`, all devices in `cluster`. Post: a p2p step whose transfers
// bring `to`'s pieces into place (a target's own pieces are not sent).
Step p2p_fetch(const Layout& from, const Layout& to, const TensorSpec& tensor, const cluster::Cluster& cluster,
               std::string rule = "p2p");

}  // namespace loom::comm
