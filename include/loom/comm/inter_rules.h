// Inter-group transition rules (SuperScaler Figure 10 g–h): from a layout on the producer devices to a
// layout on another device list `targets` (in the consumer's grid order). The layout after a rule
// differs from `from` in at most one factor; the data moves by point-to-point sends, each target device
// fetching its piece from a holder (p2p_fetch.h), so the sends form the pattern the rule names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loom/cluster/cluster.h"
#include "loom/comm/intra_rules.h"
#include "loom/comm/layout.h"

namespace loom::comm {

// Move. Pre: |targets| = |from|. Post: the same RVD on targets; each device sends its piece to one target.
Expected<Transition> move_layout(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                                 const cluster::Cluster& cluster);

// Broadcast. Pre: |targets| = k·|from|. Post: R(r·k): each piece goes to k targets.
Expected<Transition> broadcast_r(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                                 std::int64_t k, const cluster::Cluster& cluster);

// RD-scatter. Pre: |targets| = k·|from|, shape[dim] divisible by d[dim]·k. Post: d[dim]·k: each device
// scatters k sub-chunks of its piece to k targets.
Expected<Transition> rd_scatter(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                                std::size_t dim, std::int64_t k, const cluster::Cluster& cluster);

// RD-gather. Pre: |from| = k·|targets|, k | d[dim]. Post: d[dim]/k: each target gathers k neighbouring chunks.
Expected<Transition> rd_gather(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                               std::size_t dim, std::int64_t k, const cluster::Cluster& cluster);

// Replica pick. Pre: |from| = k·|targets|, k | r. Post: R(r/k): each target copies from one of k replicas.
Expected<Transition> pick_replicas(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                                   std::int64_t k, const cluster::Cluster& cluster);

// RV-gather. Pre: |from| = k·|targets|, k | v. Post: V(v/k): each target sums k value parts it receives.
Expected<Transition> rv_gather(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                               std::int64_t k, const cluster::Cluster& cluster);

// Every rule above with every factor and dimension that satisfy its precondition.
std::vector<Transition> inter_transitions(const Layout& from, const TensorSpec& tensor, const std::vector<int>& targets,
                                          const cluster::Cluster& cluster);

}  // namespace loom::comm
