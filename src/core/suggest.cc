#include "loom/core/suggest.h"

#include <algorithm>
#include <array>
#include <vector>

#include <fmt/format.h>

namespace loom {
namespace {

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool starts_with_ignoring_case(std::string_view text, std::string_view prefix) {
  if (prefix.size() > text.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i)
    if (lower(text[i]) != lower(prefix[i])) return false;
  return true;
}

}  // namespace

// Lowrance and Wagner's algorithm (the unrestricted distance, with swaps of characters that other edits
// have separated): d[i][j] is the distance between a's first i characters and b's first j, shifted by one
// row and column so that row and column 0 hold the "infinity" bound. last_row[c] is the last row whose a
// character is c; last_col the last column in this row where b matched a.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t rows = a.size() + 2, cols = b.size() + 2, infinity = a.size() + b.size();
  std::vector<std::size_t> d(rows * cols, 0);
  const auto at = [&](std::size_t i, std::size_t j) -> std::size_t& { return d[i * cols + j]; };
  at(0, 0) = infinity;
  for (std::size_t i = 0; i <= a.size(); ++i) {
    at(i + 1, 0) = infinity;
    at(i + 1, 1) = i;
  }
  for (std::size_t j = 0; j <= b.size(); ++j) {
    at(0, j + 1) = infinity;
    at(1, j + 1) = j;
  }
  std::array<std::size_t, 256> last_row{};
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t last_col = 0;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t k = last_row[static_cast<unsigned char>(lower(b[j - 1]))];
      const std::size_t l = last_col;
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      if (same) last_col = j;
      at(i + 1, j + 1) = std::min({at(i, j) + (same ? 0 : 1), at(i + 1, j) + 1, at(i, j + 1) + 1,
                                   at(k, l) + (i - k - 1) + 1 + (j - l - 1)});
    }
    last_row[static_cast<unsigned char>(lower(a[i - 1]))] = i;
  }
  return at(a.size() + 1, b.size() + 1);
}

std::size_t typo_cutoff(std::string_view name) { return std::max<std::size_t>(1, name.size() / 3); }

std::optional<std::string> closest_match(std::string_view name, std::span<const std::string> candidates) {
  const std::string* best = nullptr;
  // Rank: 0 exact, 1 extended prefix, 2 typo; within a rank the smaller key wins (candidate length for a
  // prefix, distance for a typo), then the earlier candidate.
  int best_rank = 3;
  std::size_t best_key = 0;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(name, candidate);
    int rank = 3;
    std::size_t key = 0;
    if (distance == 0) {
      rank = 0;
    } else if (name.size() >= 2 && starts_with_ignoring_case(candidate, name)) {
      rank = 1;
      key = candidate.size();
    } else if (distance <= typo_cutoff(name)) {
      rank = 2;
      key = distance;
    }
    if (rank < best_rank || (rank == best_rank && rank < 3 && key < best_key)) {
      best = &candidate;
      best_rank = rank;
      best_key = key;
    }
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

std::string did_you_mean(std::string_view name, std::span<const std::string> candidates) {
  const std::optional<std::string> match = closest_match(name, candidates);
  return match ? fmt::format("did you mean '{}'?", *match) : std::string{};
}

}  // namespace loom
