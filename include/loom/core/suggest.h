// "Did you mean" suggestions for a name the user mistyped: an option, a command, a policy, a keyword.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace loom {

// The Damerau-Levenshtein distance between `a` and `b`, ignoring ASCII case: the fewest insertions,
// deletions, substitutions and swaps of two adjacent characters that turn one into the other. Unlike the
// restricted form (optimal string alignment), it is a metric: symmetric and obeying the triangle inequality.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The largest edit distance at which a candidate still counts as a likely typo of `name`: a third of its
// length, at least 1 ("polcy" -> "policy", "modles" -> "models"; "frobnicate" matches nothing in `loom`).
std::size_t typo_cutoff(std::string_view name);

// The candidate the user most likely meant by `name`, or nothing when none is close. In order of
// preference: an exact match (ignoring case); a candidate that `name` (two characters or more) begins,
// the shortest ("micro" -> "micro-batches"); the nearest within typo_cutoff(name). Ties go to the
// earlier candidate, so the answer is deterministic.
std::optional<std::string> closest_match(std::string_view name, std::span<const std::string> candidates);

// "did you mean 'X'?" for closest_match's answer, or "" when there is none: ready to be an Error's hint.
std::string did_you_mean(std::string_view name, std::span<const std::string> candidates);

}  // namespace loom
