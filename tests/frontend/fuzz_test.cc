// Fuzz-style robustness of the JSON reader and the validator: damaged graph documents must come back
// as an error with a message, or as a graph that validates; never a crash, an exception or a hang.
// Every case is deterministic; a failure prints the seed (or truncation length) that reproduces it.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "loom/ir/autograd.h"
#include "loom/ir/graph_builder.h"
#include "loom/ir/graph_json.h"
#include "loom/ir/graph_text.h"
#include "loom/ir/validate.h"
#include "loom/ops/registry.h"

namespace loom::frontend {
namespace {

// A small training graph: forward linear (with bias), matmul, einsum; backward with an accumulate
// (h is read twice) and a loss seed; adamw with real, boolean and integer-list attributes.
std::string seed_document() {
  ir::GraphBuilder b("fuzz", ops::builtin_ops());
  ir::TensorId x = b.input("x", {2, 3}, ir::DType::f32);
  ir::TensorId w1 = b.parameter("w1", {4, 3}, ir::DType::f32);
  ir::TensorId b1 = b.parameter("b1", {4}, ir::DType::f32);
  ir::TensorId w2 = b.parameter("w2", {4, 4}, ir::DType::f32);
  ir::TensorId h = b.op("linear", "h", {x, w1, b1});
  ir::TensorId y = b.op("matmul", "y", {h, w2});
  b.set_loss(b.op("einsum", "loss", {y, h}, {{"equation", std::string("ij,ij->")}}));
  Expected<ir::Graph> forward = std::move(b).finish();
  EXPECT_TRUE(forward) << forward.error().to_string();
  if (!forward) return {};
  Expected<ir::Graph> training = ir::build_training_graph(*forward, ops::builtin_ops(), ir::OptimizerOptions{});
  EXPECT_TRUE(training) << training.error().to_string();
  return ir::graph_to_json(training ? *training : *forward);
}

// A forward graph of shape and image ops, so mutated sizes and attributes reach their signature code
// (the training seed above has none of them).
std::string shape_ops_document() {
  ir::GraphBuilder b("fuzz_shapes", ops::builtin_ops());
  ir::TensorId x = b.input("x", {2, 3, 8, 8}, ir::DType::f32);
  ir::TensorId w = b.parameter("w", {4, 3, 3, 3}, ir::DType::f32);
  using Ints = std::vector<std::int64_t>;
  ir::TensorId c = b.op("conv2d", "conv", {x, w}, {{"padding", Ints{1}}, {"stride", Ints{1, 1}}});       // [2 4 8 8]
  ir::TensorId p = b.op("max_pool2d", "pool", {c}, {{"kernel", Ints{2}}});                               // [2 4 4 4]
  ir::TensorId u = b.op("upsample_nearest2d", "up", {p}, {{"scale", std::int64_t{2}}});                  // [2 4 8 8]
  ir::TensorId t = b.op("transpose", "t", {u}, {{"dim0", std::int64_t{2}}, {"dim1", std::int64_t{3}}});  // [2 4 8 8]
  ir::TensorId r = b.op("reshape", "r", {t}, {{"shape", Ints{2, 4, -1}}});                              // [2 4 64]
  std::vector<ir::TensorId> halves = b.ops("chunk", "halves", {r}, {{"chunks", std::int64_t{2}}, {"dim", std::int64_t{1}}});
  std::vector<ir::TensorId> parts =
      b.ops("split", "parts", {halves.at(0)}, {{"sizes", Ints{16, 48}}, {"dim", std::int64_t{2}}});  // [2 2 16], [2 2 48]
  ir::TensorId s = b.op("slice", "s", {parts.at(1)},
                        {{"dim", std::int64_t{2}}, {"start", std::int64_t{0}}, {"end", std::int64_t{32}},
                         {"step", std::int64_t{2}}});  // [2 2 16]
  b.op("concat", "cat", {parts.at(0), s, halves.at(1)}, {{"dim", std::int64_t{2}}});  // [2 2 96]
  Expected<ir::Graph> graph = std::move(b).finish();
  EXPECT_TRUE(graph) << graph.error().to_string();
  return graph ? ir::graph_to_json(*graph) : std::string();
}

enum class Outcome { parse_error, invalid, valid };

// The property every input must satisfy. Returns how far the input got, for coverage accounting.
Outcome check_document(const std::string& text, const std::string& what) {
  try {
    Expected<ir::Graph> graph = ir::graph_from_json(text);
    if (!graph) {
      EXPECT_FALSE(graph.error().message.empty()) << what << ": parse error without a message";
      return Outcome::parse_error;
    }
    // Whatever parses must print and write back to the same graph (no NaN reals are produced here).
    (void)ir::graph_to_text(*graph);
    Expected<ir::Graph> again = ir::graph_from_json(ir::graph_to_json(*graph));
    EXPECT_TRUE(again && *again == *graph) << what << ": a parsed graph does not survive a round trip";
    Expected<void> valid = ir::validate_graph(*graph, ops::builtin_ops());
    if (!valid) {
      EXPECT_FALSE(valid.error().message.empty()) << what << ": validation error without a message";
      return Outcome::invalid;
    }
    return Outcome::valid;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": exception escaped: " << e.what();
  } catch (...) {
    ADD_FAILURE() << what << ": unknown exception escaped";
  }
  return Outcome::parse_error;
}

// Spans of the JSON text's number and string tokens (strings with their quotes).
struct Tokens {
  std::vector<std::pair<std::size_t, std::size_t>> numbers, strings;
};

Tokens tokenize(const std::string& text) {
  Tokens tokens;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '"') {
      std::size_t j = i + 1;
      while (j < text.size() && text[j] != '"') j += text[j] == '\\' ? 2 : 1;
      const std::size_t end = std::min(j + 1, text.size());
      tokens.strings.emplace_back(i, end - i);
      i = end;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      std::size_t j = i + 1;
      while (j < text.size() && std::string_view("0123456789.eE+-").find(text[j]) != std::string_view::npos) ++j;
      tokens.numbers.emplace_back(i, j - i);
      i = j;
    } else {
      ++i;
    }
  }
  return tokens;
}

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}

  void mutate(std::string& text) {
    if (text.empty()) return;
    // Byte-level damage mostly stops at the JSON parser; token-level damage reaches the reader and the
    // validator, so it gets most of the draws.
    switch (pick(10)) {
      case 0: text[pick(text.size())] = static_cast<char>(pick(256)); break;
      case 1: {
        const std::size_t at = pick(text.size());
        text.erase(at, 1 + pick(32));
        break;
      }
      case 2: {
        const std::size_t at = pick(text.size());
        const std::string span = text.substr(at, 1 + pick(48));
        text.insert(pick(text.size() + 1), span);
        break;
      }
      case 3:
      case 4: swap_tokens(text, tokenize(text).numbers); break;
      case 5:
      case 6:
      case 7: replace_token(text, tokenize(text).numbers, kNumbers); break;
      default: replace_token(text, tokenize(text).strings, kStrings); break;
    }
  }

  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }

 private:
  static constexpr std::string_view kNumbers[] = {
      "-1",  "0",   "1",    "2",     "3",     "4294967295", "4294967296", "18446744073709551616", "9223372036854775807",
      "-9223372036854775808", "1e308", "1e999", "-0", "0.5", "2.0", "1e-9", "1000000000", "7",
      "6148914691236517206"};  // ~2^64 / 3: three of them multiply past int64 to a small positive number
  static constexpr std::string_view kStrings[] = {
      R"("")",         R"("f32")",     R"("bf16")",       R"("i64")",       R"("parameter")", R"("gradient")",
      R"("input")",    R"("optimizer_state")", R"("backward")", R"("forward")", R"("optimizer")", R"("linear")",
      R"("matmul")",   R"("einsum")",  R"("accumulate")", R"("adamw")",      R"("ij,jk->ik")", R"("->")",
      R"("* i+, o i+ -> * o")", R"("m k+, k+ n -> m n")", R"("(")", R"("\u0000")", R"("grad_inputs")",
      R"("saved_inputs")", R"("real")", R"("inf")", R"(1)", R"(true)", R"(null)", R"([])", R"({})", R"([0,1])",
      R"({"real":0.5})"};

  void swap_tokens(std::string& text, const std::vector<std::pair<std::size_t, std::size_t>>& spans) {
    if (spans.size() < 2) return;
    auto a = spans[pick(spans.size())], b = spans[pick(spans.size())];
    if (a.first == b.first) return;
    if (a.first > b.first) std::swap(a, b);
    const std::string first = text.substr(a.first, a.second), second = text.substr(b.first, b.second);
    text.replace(b.first, b.second, first);  // the later span first, so the earlier offsets stay right
    text.replace(a.first, a.second, second);
  }

  template <std::size_t N>
  void replace_token(std::string& text, const std::vector<std::pair<std::size_t, std::size_t>>& spans,
                     const std::string_view (&choices)[N]) {
    if (spans.empty()) return;
    const auto [at, length] = spans[pick(spans.size())];
    text.replace(at, length, choices[pick(N)]);
  }

  std::mt19937_64 rng_;
};

// Both seeds: the training graph (reader, autograd roles, optimizer attrs) and the shape-op graph.
std::vector<std::pair<std::string, std::string>> seed_documents() {
  return {{"training seed", seed_document()}, {"shape-op seed", shape_ops_document()}};
}

TEST(GraphFuzz, SeedDocumentValidates) {
  for (const auto& [name, document] : seed_documents()) {
    ASSERT_FALSE(document.empty()) << name;
    EXPECT_EQ(check_document(document, name), Outcome::valid);
  }
}

TEST(GraphFuzz, EveryTruncationIsAnError) {
  for (const auto& [name, document] : seed_documents()) {
    ASSERT_FALSE(document.empty()) << name;
    // Every prefix short of the closing brace is malformed JSON. (The trailing newline may go.)
    const std::size_t end = document.rfind('}');
    for (std::size_t length = 0; length < end; ++length) {
      const Outcome outcome =
          check_document(document.substr(0, length), fmt::format("{}: truncation to {} bytes", name, length));
      ASSERT_EQ(outcome, Outcome::parse_error) << name << ": truncation to " << length << " bytes was accepted";
      if (::testing::Test::HasFailure()) FAIL() << name << ": stopped at truncation to " << length << " bytes";
    }
  }
}

void check_random_mutations(const std::string& name, const std::string& document, std::uint64_t base_seed) {
  ASSERT_FALSE(document.empty()) << name;
  constexpr int kCases = 6000;
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < kCases; ++i) {
    const std::uint64_t seed = base_seed + static_cast<std::uint64_t>(i);
    Mutator mutator(seed);
    std::string text = document;
    const std::size_t rounds = 1 + mutator.pick(3);
    for (std::size_t r = 0; r < rounds; ++r) mutator.mutate(text);
    ++counts[static_cast<int>(check_document(text, fmt::format("{}: mutation seed {}", name, seed)))];
    if (::testing::Test::HasFailure())
      FAIL() << name << ": stopped at mutation seed " << seed << "; the input was:\n" << text;
  }
  // The mutations must reach past the JSON parser, or the test checks little of the reader.
  EXPECT_GT(counts[static_cast<int>(Outcome::invalid)], kCases / 40) << name;
  EXPECT_GT(counts[static_cast<int>(Outcome::valid)], kCases / 100) << name;
  std::printf("%s mutations: %d parse errors, %d invalid graphs, %d valid graphs\n", name.c_str(), counts[0],
              counts[1], counts[2]);
}

TEST(GraphFuzz, RandomMutationsNeverCrash) { check_random_mutations("training seed", seed_document(), 20240601); }

TEST(GraphFuzz, ShapeOpMutationsNeverCrash) {
  check_random_mutations("shape-op seed", shape_ops_document(), 20240901);
}

}  // namespace
}  // namespace loom::frontend
