#include "loom/core/suggest.h"

#include <algorithm>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace loom {
namespace {

// Random strings over a small alphabet (with both cases), so that repeats, swaps and case matter.
class RandomStrings {
 public:
  explicit RandomStrings(unsigned seed, std::string_view alphabet = "abcdAB-") : rng_(seed), alphabet_(alphabet) {}
  std::string next(std::size_t max_length = 8) {
    std::string s(std::uniform_int_distribution<std::size_t>(0, max_length)(rng_), ' ');
    for (char& c : s) c = alphabet_[below(alphabet_.size())];
    return s;
  }
  std::size_t below(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }

 private:
  std::mt19937 rng_;
  std::string_view alphabet_;
};

std::string lowered(std::string s) {
  for (char& c : s) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return s;
}

std::string uppered(std::string s) {
  for (char& c : s) c = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
  return s;
}

// References: plain Levenshtein, and the restricted form (optimal string alignment) that allows a swap
// only of two characters no other edit touches. Damerau-Levenshtein <= OSA <= Levenshtein <= 2 x DL.
std::size_t reference_distance(std::string_view a, std::string_view b, bool swaps) {
  const std::string x = lowered(std::string(a)), y = lowered(std::string(b));
  std::vector<std::vector<std::size_t>> d(x.size() + 1, std::vector<std::size_t>(y.size() + 1));
  for (std::size_t i = 0; i <= x.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= y.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= x.size(); ++i)
    for (std::size_t j = 1; j <= y.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (x[i - 1] == y[j - 1] ? 0 : 1)});
      if (swaps && i > 1 && j > 1 && x[i - 1] == y[j - 2] && x[i - 2] == y[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[x.size()][y.size()];
}

TEST(EditDistance, KnownValues) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("modles", "models"), 1u);  // one swap
  EXPECT_EQ(edit_distance("polcy", "policy"), 1u);
  EXPECT_EQ(edit_distance("GPT", "gpt"), 0u);
  // The unrestricted distance: "ca" -> "ac" -> "abc" is 2; optimal string alignment says 3.
  EXPECT_EQ(edit_distance("ca", "abc"), 2u);
  EXPECT_EQ(reference_distance("ca", "abc", true), 3u);
}

TEST(EditDistance, IsAMetricIgnoringCase) {
  RandomStrings random(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string a = random.next(), b = random.next(), c = random.next();
    const std::size_t ab = edit_distance(a, b);
    EXPECT_EQ(edit_distance(a, a), 0u);
    EXPECT_EQ(ab == 0, lowered(a) == lowered(b)) << a << " / " << b;
    EXPECT_EQ(ab, edit_distance(b, a)) << a << " / " << b;
    EXPECT_LE(edit_distance(a, c), ab + edit_distance(b, c)) << a << " / " << b << " / " << c;
    EXPECT_EQ(ab, edit_distance(uppered(a), b)) << a << " / " << b;
    EXPECT_GE(ab, std::max(a.size(), b.size()) - std::min(a.size(), b.size()));
    EXPECT_LE(ab, std::max(a.size(), b.size()));
  }
}

// Short strings over three letters: dense enough in swaps that the restricted form (OSA) breaks the
// triangle inequality on some of them; the unrestricted distance never does.
TEST(EditDistance, TriangleInequalityWhereTheRestrictedFormFails) {
  RandomStrings random(23, "abc");
  int restricted_form_violations = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const std::string a = random.next(4), b = random.next(4), c = random.next(4);
    EXPECT_LE(edit_distance(a, c), edit_distance(a, b) + edit_distance(b, c)) << a << " / " << b << " / " << c;
    if (reference_distance(a, c, true) > reference_distance(a, b, true) + reference_distance(b, c, true))
      ++restricted_form_violations;
  }
  EXPECT_GT(restricted_form_violations, 0);
}

TEST(EditDistance, LiesBetweenItsRestrictedAndSwapFreeForms) {
  RandomStrings random(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string a = random.next(), b = random.next();
    const std::size_t dl = edit_distance(a, b), osa = reference_distance(a, b, true),
                      levenshtein = reference_distance(a, b, false);
    EXPECT_LE(dl, osa) << a << " / " << b;
    EXPECT_LE(osa, levenshtein) << a << " / " << b;
    EXPECT_LE(levenshtein, 2 * dl) << a << " / " << b;
  }
}

TEST(EditDistance, OneEditIsDistanceOne) {
  RandomStrings random(13);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::string a = random.next();
    std::string b = a;
    switch (random.below(4)) {
      case 0: b.insert(random.below(a.size() + 1), 1, 'z'); break;
      case 1: if (!b.empty()) b.erase(random.below(b.size()), 1); break;
      case 2: if (!b.empty()) b[random.below(b.size())] = 'z'; break;
      default: if (b.size() >= 2) { const std::size_t i = random.below(b.size() - 1); std::swap(b[i], b[i + 1]); }
    }
    EXPECT_LE(edit_distance(a, b), 1u) << a << " / " << b;
  }
}

TEST(ClosestMatch, SuggestsTyposPrefixesAndCase) {
  const std::vector<std::string> commands = {"models", "graph", "ops", "comm", "verify", "clusters",
                                             "profile", "plan", "compare", "run"};
  EXPECT_EQ(closest_match("modles", commands), "models");
  EXPECT_EQ(closest_match("MODELS", commands), "models");
  EXPECT_EQ(closest_match("clusterz", commands), "clusters");
  EXPECT_EQ(closest_match("comp", commands), "compare");  // a prefix, though 3 edits away
  EXPECT_EQ(closest_match("frobnicate", commands), std::nullopt);
  EXPECT_EQ(closest_match("zzz", commands), std::nullopt);
  const std::vector<std::string> options = {"--tp", "--pp", "--micro-batches", "--micro-batch-size", "--text"};
  EXPECT_EQ(closest_match("--tpx", options), "--tp");
  EXPECT_EQ(closest_match("--micro", options), "--micro-batches");  // the shortest extension
  EXPECT_EQ(closest_match("--micro-batchs", options), "--micro-batches");
  EXPECT_EQ(closest_match("x", std::vector<std::string>{}), std::nullopt);
}

TEST(ClosestMatch, ExactMatchWins) {
  RandomStrings random(17);
  for (int trial = 0; trial < 1000; ++trial) {
    std::vector<std::string> candidates;
    for (std::size_t n = random.below(8); n > 0; --n) candidates.push_back(random.next());
    const std::string name = random.next();
    const std::size_t at = random.below(candidates.size() + 1);
    const bool upper = random.below(2) == 1;
    candidates.insert(candidates.begin() + static_cast<std::ptrdiff_t>(at), upper ? uppered(name) : name);
    const std::optional<std::string> match = closest_match(name, candidates);
    ASSERT_TRUE(match.has_value()) << name;
    EXPECT_EQ(lowered(*match), lowered(name));
  }
}

// What closest_match answers is exactly what its contract allows: an exact match, else the shortest
// candidate `name` begins, else a nearest candidate within the cut-off, else nothing.
TEST(ClosestMatch, NothingBeyondTheCutoff) {
  RandomStrings random(19);
  int suggested = 0, refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> candidates;
    for (std::size_t n = random.below(6); n > 0; --n) candidates.push_back(random.next(10));
    const std::string name = random.next(6);
    const std::optional<std::string> match = closest_match(name, candidates);
    std::size_t nearest = SIZE_MAX;
    bool exact = false, extended = false;
    for (const std::string& c : candidates) {
      nearest = std::min(nearest, edit_distance(name, c));
      exact = exact || edit_distance(name, c) == 0;
      extended = extended || (name.size() >= 2 && lowered(c).starts_with(lowered(name)));
    }
    if (!match) {
      ++refused;
      EXPECT_FALSE(extended) << name;
      EXPECT_TRUE(candidates.empty() || nearest > typo_cutoff(name)) << name;
      continue;
    }
    ++suggested;
    ASSERT_NE(std::find(candidates.begin(), candidates.end(), *match), candidates.end());
    const std::size_t distance = edit_distance(name, *match);
    if (exact) {
      EXPECT_EQ(distance, 0u) << name;
    } else if (extended) {
      EXPECT_TRUE(lowered(*match).starts_with(lowered(name))) << name << " -> " << *match;
      for (const std::string& c : candidates) {
        if (lowered(c).starts_with(lowered(name))) {
          EXPECT_LE(match->size(), c.size()) << name;
        }
      }
    } else {
      EXPECT_LE(distance, typo_cutoff(name)) << name << " -> " << *match;
      EXPECT_EQ(distance, nearest) << name << " -> " << *match;
    }
  }
  // The random cases reach both outcomes.
  EXPECT_GT(suggested, 100);
  EXPECT_GT(refused, 100);
}

TEST(ClosestMatch, DidYouMeanFormatsTheHint) {
  const std::vector<std::string> policies = {"dp", "tp", "megatron", "zero1", "zero3"};
  EXPECT_EQ(did_you_mean("megatorn", policies), "did you mean 'megatron'?");
  EXPECT_EQ(did_you_mean("alpa-search", policies), "");
}

}  // namespace
}  // namespace loom
