// nnScaler's 3F1B order and its warm-up / cool-down search (schedule_3f1b.h).
#include "loom/plan/schedule_3f1b.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include <fmt/format.h>

namespace loom::plan {
namespace {

constexpr double kNotYet = std::numeric_limits<double>::infinity();

std::size_t us(int i) { return static_cast<std::size_t>(i); }

// Where the template is being built: per device, the next micro-batch of each stream (stream q < P:
// pass q's forwards; stream P: the backwards), and per block when it ends.
struct Builder {
  int S, P, m;
  int ahead;  // how many micro-batches the first pass may run ahead of the last (beyond S - s held)
  BlockCosts costs;
  std::vector<std::vector<int>> next;   // [device][stream]
  std::vector<double> free;             // [device]: when its last block ends
  std::vector<int> held, in_flight;     // [device]: last-pass activations; micro-batches started, not done
  std::vector<double> end_f, end_b;     // [stage * m + mb] (forwards), [device * m + mb] (backwards)
  std::vector<std::vector<Block>> seq;  // [device]
  std::size_t left;

  Builder(int devices, int passes, int micro_batches, int recycles_ahead, BlockCosts block_costs)
      : S(devices),
        P(passes),
        m(micro_batches),
        ahead(recycles_ahead),
        costs(block_costs),
        next(us(devices), std::vector<int>(us(passes + 1), 0)),
        free(us(devices), 0),
        held(us(devices), 0),
        in_flight(us(devices), 0),
        end_f(us(devices * passes * micro_batches), kNotYet),
        end_b(us(devices * micro_batches), kNotYet),
        seq(us(devices)),
        left(us(devices * (passes + 1) * micro_batches)) {}

  double cost(int stream) const { return stream < P ? costs.forward : costs.backward + costs.weight; }
  int ofst(int d) const { return S - 1 - d; }

  // When stream q's next block may start on device d, kNotYet while it may not (its inputs are not
  // placed yet, a constraint or a memory bound holds it back, or the stream is done).
  double ready(int d, int q) const {
    const int k = next[us(d)][us(q)];
    if (k >= m) return kNotYet;
    const auto done = [&](int stream, int j) { return next[us(d)][us(stream)] > j; };
    double inputs = 0;
    if (q < P) {
      const int v = q * S + d;
      if (v > 0) inputs = end_f[us((v - 1) * m + k)];
      const int j = k + 1;  // (1), (2): F(q - 1, j) before F(q, j - 1)
      if (q > 0 && j >= P - 1 && j < m && !done(q - 1, j)) return kNotYet;
      if (q == 0 && in_flight[us(d)] >= S - d + ahead) return kNotYet;
      if (q == P - 1 && held[us(d)] >= S - d) return kNotYet;
    } else {
      inputs = end_f[us(((P - 1) * S + d) * m + k)];
      if (d + 1 < S) inputs = std::max(inputs, end_b[us((d + 1) * m + k)]);
      const int j = k + ofst(d);  // (3): F(P - 1, j) before B(j - ofst)
      if (k > 0 && j < m && !done(P - 1, j)) return kNotYet;
    }
    return inputs == kNotYet ? kNotYet : std::max(inputs, free[us(d)]);
  }

  // The device that can start a block earliest, and its candidates: the streams whose next block can
  // start before the earliest of them could end (active schedules), backward first, then later passes.
  std::optional<std::pair<int, std::vector<int>>> choices() const {
    int best_d = -1;
    double best = kNotYet;
    for (int d = 0; d < S; ++d)
      for (int q = 0; q <= P; ++q)
        if (const double t = ready(d, q); t < best) best = t, best_d = d;
    if (best_d < 0) return std::nullopt;
    double horizon = kNotYet;
    for (int q = 0; q <= P; ++q)
      if (const double t = ready(best_d, q); t != kNotYet) horizon = std::min(horizon, t + cost(q));
    std::vector<int> candidates;
    for (int q = P; q >= 0; --q)
      if (ready(best_d, q) < horizon) candidates.push_back(q);
    return std::pair{best_d, std::move(candidates)};
  }

  void run(int d, int q) {
    const double start = ready(d, q);
    const int k = next[us(d)][us(q)]++;
    free[us(d)] = start + cost(q);
    if (q < P) {
      end_f[us((q * S + d) * m + k)] = free[us(d)];
      seq[us(d)].push_back({q * S + d, k, BlockPart::forward});
      if (q == 0) ++in_flight[us(d)];
      if (q == P - 1) ++held[us(d)];
    } else {
      end_b[us(d * m + k)] = free[us(d)];
      seq[us(d)].push_back({(P - 1) * S + d, k, BlockPart::backward});
      --held[us(d)];
      --in_flight[us(d)];
    }
    --left;
  }

  // (makespan, sum of the devices' ends) of the greedy completion; infinite when it gets stuck.
  std::pair<double, double> price() const {
    if (left > 0) return {kNotYet, kNotYet};
    double makespan = 0, sum = 0;
    for (double f : free) makespan = std::max(makespan, f), sum += f;
    return {makespan, sum};
  }
};

// Completes `b` taking at every step the first candidate (backward first) or, `forward_first`, the
// last (the earliest pass first).
void complete_greedily(Builder& b, bool forward_first) {
  while (b.left > 0) {
    const auto choice = b.choices();
    if (!choice) return;
    b.run(choice->first, forward_first ? choice->second.back() : choice->second.front());
  }
}

// From `b`, where a device has a choice, each candidate completed greedily and the cheapest taken;
// `rollouts` counts the completions.
Builder pilot_search(Builder b, std::int64_t& rollouts) {
  while (b.left > 0) {
    const auto choice = b.choices();
    if (!choice) break;
    const auto& [d, candidates] = *choice;
    std::size_t pick = 0;
    if (candidates.size() > 1) {
      std::pair<double, double> best{kNotYet, kNotYet};
      for (std::size_t c = 0; c < candidates.size(); ++c) {
        for (bool forward_first : {false, true}) {
          Builder trial = b;
          trial.run(d, candidates[c]);
          complete_greedily(trial, forward_first);
          ++rollouts;
          if (const auto price = trial.price(); price < best) best = price, pick = c;
        }
      }
    }
    b.run(d, candidates[pick]);
  }
  return b;
}

}  // namespace

std::vector<std::string> three_f_one_b_violations(const std::vector<std::vector<Block>>& devices, int passes,
                                                  int micro_batches) {
  std::vector<std::string> out;
  const int S = static_cast<int>(devices.size()), P = passes, m = micro_batches;
  if (S < 1 || P < 1 || m < 1) return {fmt::format("{} devices, {} passes, {} micro-batches", S, P, m)};
  for (int d = 0; d < S; ++d) {
    const auto& seq = devices[us(d)];
    // position[stream][k]: where the block sits in the device's order, -1 when absent.
    std::vector<std::vector<int>> position(us(P + 1), std::vector<int>(us(m), -1));
    for (std::size_t i = 0; i < seq.size(); ++i) {
      const Block& b = seq[i];
      const int pass = b.stage / S;
      const bool valid = b.stage >= 0 && b.stage < P * S && b.stage % S == d && b.micro_batch >= 0 &&
                         b.micro_batch < m &&
                         (b.part == BlockPart::forward || (b.part == BlockPart::backward && pass == P - 1));
      if (!valid) {
        out.push_back(fmt::format("device {}: block {} of stage {} does not belong there", d, to_string(b), b.stage));
        continue;
      }
      int& at = position[us(b.part == BlockPart::forward ? pass : P)][us(b.micro_batch)];
      if (at >= 0) out.push_back(fmt::format("device {}: block {} of stage {} twice", d, to_string(b), b.stage));
      at = static_cast<int>(i);
    }
    const auto before = [&](int qa, int ja, int qb, int jb, const char* rule) {
      const int a = position[us(qa)][us(ja)], b = position[us(qb)][us(jb)];
      if (a >= 0 && b >= 0 && a > b)
        out.push_back(fmt::format("device {}: {} broken: {}{} of stream {} after {}{} of stream {}", d, rule,
                                  qa == P ? 'B' : 'F', ja, qa, qb == P ? 'B' : 'F', jb, qb));
    };
    for (int q = 0; q <= P; ++q)
      for (int k = 0; k < m; ++k) {
        if (position[us(q)][us(k)] < 0)
          out.push_back(fmt::format("device {}: {}{} of stream {} missing", d, q == P ? 'B' : 'F', k, q));
        if (k > 0) before(q, k - 1, q, k, "micro-batch order");
      }
    for (int p = 0; p + 1 < P; ++p)
      for (int j = std::max(P - 1, 1); j < m; ++j) before(p, j, p + 1, j - 1, "Table 7 (1)/(2)");
    for (int j = S - d; j < m; ++j) before(P - 1, j, P, j - (S - 1 - d), "Table 7 (3)");
  }
  return out;
}

Expected<ThreeFOneBSearch> search_three_f_one_b(int devices, int passes, int micro_batches, BlockCosts costs) {
  if (devices < 1 || micro_batches < 1 || passes < 2)
    return fail(fmt::format("3F1B: {} devices, {} passes and {} micro-batches; it needs at least 1 device and micro-batch "
                            "and 2 passes",
                            devices, passes, micro_batches),
                "3F1B pipelines a model that runs its layers several times (recycles); use 1f1b for one pass");
  // The bound on micro-batches in flight, from the steady state's P - 1 upwards: the first bound that
  // reaches the best makespan of all (each a pilot search) wins, as it holds the least.
  ThreeFOneBSearch result;
  std::optional<Builder> best;
  std::pair<double, double> best_price{kNotYet, kNotYet};
  for (int ahead = passes - 1; ahead <= passes - 1 + devices; ++ahead) {
    Builder b = pilot_search(Builder(devices, passes, micro_batches, ahead, costs), result.rollouts);
    if (b.price().first < best_price.first) best_price = b.price(), best = std::move(b), result.recycles_ahead = ahead;
  }
  if (!best)
    return fail(fmt::format("3F1B search: no template completes for {} devices, {} passes and {} micro-batches",
                            devices, passes, micro_batches),
                "report this: the constraints of Table 7 admit 1F1B-like templates for any size");
  Builder& b = *best;
  result.devices = std::move(b.seq);
  LOOM_ASSIGN_OR_RETURN(result.evaluation,
                        with_context(evaluate_schedule(result.devices, devices * passes, micro_batches, costs),
                                     "3F1B search"));
  return result;
}

}  // namespace loom::plan
