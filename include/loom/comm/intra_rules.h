// Intra-group transition rules (SuperScaler Figure 10 a–f): producer and consumer on the same devices.
// Each rule moves a factor k > 1 between two grid axes with shift_factor (factor_shift.h) and names the
// primitive that performs the move. Each returns an error when its precondition does not hold.
// Sizes: S is the bytes a device holds before the step (bytes_per_device of `from`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loom/comm/layout.h"
#include "loom/comm/step.h"

namespace loom::comm {

// A transition: the layout after it and the step that gets there.
struct Transition {
  Layout after;
  Step step;
};

// V→R all-reduce. Pre: k | v. Post: R(r·k)V(v/k), D unchanged; groups of k value parts of one chunk.
Expected<Transition> all_reduce_v_to_r(const Layout& from, const TensorSpec& tensor, std::int64_t k);

// D→R all-gather. Pre: k | d[dim]. Post: R(r·k), d[dim]/k; each group gathers k neighbouring chunks.
Expected<Transition> all_gather_d_to_r(const Layout& from, const TensorSpec& tensor, std::size_t dim, std::int64_t k);

// V→D reduce-scatter. Pre: k | v and shape[dim] divisible by d[dim]·k. Post: V(v/k), d[dim]·k.
Expected<Transition> reduce_scatter_v_to_d(const Layout& from, const TensorSpec& tensor, std::size_t dim,
                                           std::int64_t k);

// D(i)→D(j) all-to-all. Pre: i != j, k | d[i], shape[j] divisible by d[j]·k. Post: d[i]/k, d[j]·k.
Expected<Transition> all_to_all_d_to_d(const Layout& from, const TensorSpec& tensor, std::size_t from_dim,
                                       std::size_t to_dim, std::int64_t k);

// R→D local chunk (no communication). Pre: k | r, shape[dim] divisible by d[dim]·k. Post: R(r/k), d[dim]·k.
Expected<Transition> local_chunk_r_to_d(const Layout& from, const TensorSpec& tensor, std::size_t dim, std::int64_t k);

// R→V local value split (no communication: one member keeps the value, the others hold zeros).
// Pre: k | r. Post: R(r/k)V(v·k).
Expected<Transition> local_value_split_r_to_v(const Layout& from, const TensorSpec& tensor, std::int64_t k);

// Every rule above applied with every factor k > 1 and dimension that satisfy its precondition.
std::vector<Transition> intra_transitions(const Layout& from, const TensorSpec& tensor);

}  // namespace loom::comm
