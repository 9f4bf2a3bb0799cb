#include "loom/ir/annotation.h"

#include <random>

#include <gtest/gtest.h>

namespace loom::ir {
namespace {

TEST(ParseAnnotation, Matmul) {
  auto a = parse_annotation("m k+, k+ n -> m n");
  ASSERT_TRUE(a) << a.error().to_string();
  ASSERT_EQ(a->inputs.size(), 2u);
  ASSERT_EQ(a->outputs.size(), 1u);
  EXPECT_EQ(a->inputs[0].dims[1].atoms[0].name, "k");
  EXPECT_EQ(a->inputs[0].dims[1].atoms[0].flag, DimFlag::reduce);
  EXPECT_EQ(a->flag_of("k"), DimFlag::reduce);
  EXPECT_EQ(a->flag_of("m"), DimFlag::none);
  EXPECT_EQ(a->identifiers(), (std::vector<std::string>{"m", "k", "n"}));
}

TEST(ParseAnnotation, EveryConstruct) {
  // variadic, merged, frozen, number, opaque and scalar output.
  auto a = parse_annotation("* (h d), ?, 4 s^ -> * h d, ");
  ASSERT_TRUE(a) << a.error().to_string();
  EXPECT_TRUE(a->inputs[0].has_variadic());
  EXPECT_TRUE(a->inputs[0].dims[1].merged());
  EXPECT_TRUE(a->inputs[1].opaque);
  EXPECT_EQ(a->inputs[2].dims[0].atoms[0].kind, DimAtom::Kind::number);
  EXPECT_EQ(a->inputs[2].dims[0].atoms[0].size, 4);
  EXPECT_EQ(a->flag_of("s"), DimFlag::frozen);
  ASSERT_EQ(a->outputs.size(), 2u);
  EXPECT_TRUE(a->outputs[1].dims.empty());  // scalar
  EXPECT_EQ(to_string(*a), "* (h d), ?, 4 s^ -> * h d, ");
}

TEST(ParseAnnotation, CanonicalFormNormalisesSpaces) {
  auto a = parse_annotation("  m   k+ ,k+ n->m n ");
  ASSERT_TRUE(a);
  EXPECT_EQ(to_string(*a), "m k+, k+ n -> m n");
}

TEST(ParseAnnotation, ScalarLoss) {
  auto a = parse_annotation("b+ s+ v^, b+ s+ -> ");
  ASSERT_TRUE(a) << a.error().to_string();
  EXPECT_TRUE(a->outputs[0].dims.empty());
  EXPECT_EQ(to_string(*a), "b+ s+ v^, b+ s+ -> ");
}

struct InvalidCase {
  const char* text;
  const char* fragment;  // must appear in the message
};

class InvalidAnnotation : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidAnnotation, IsRejectedWithAPlace) {
  auto a = parse_annotation(GetParam().text);
  ASSERT_FALSE(a) << "accepted: " << GetParam().text;
  EXPECT_NE(a.error().message.find(GetParam().fragment), std::string::npos) << a.error().message;
  EXPECT_NE(a.error().message.find(GetParam().text), std::string::npos) << "the message must quote the annotation";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, InvalidAnnotation,
    ::testing::Values(
        InvalidCase{"m k+, k+ n", "column 11: expected ',' or '->'"},
        InvalidCase{"m k+ -> m k", "reduction identifier 'k+' appears in output 0"},
        InvalidCase{"m k, k+ n -> m n", "marked '+' in one place but not in another"},
        InvalidCase{"a+ b, a^ -> b", "different flags"},
        InvalidCase{"a a -> a", "identifier 'a' appears twice in input 0"},
        InvalidCase{"* a * -> a", "'*' appears 2 times in input 0"},
        InvalidCase{"a -> * a", "output 0 uses '*' but no input does"},
        InvalidCase{"a -> ?", "column 6: '?' (non-tensor input) may only appear before '->'"},
        InvalidCase{"(a) -> a", "column 1: a merged dimension '( )' needs at least two atoms"},
        InvalidCase{"(a b -> a", "column 1: '(' is never closed"},
        InvalidCase{"(a *) -> a", "cannot be merged"},
        InvalidCase{"a 0 -> a", "column 3: size '0' must be a positive number"},
        InvalidCase{"a 07 -> a", "column 3: size '07'"},
        InvalidCase{"2a -> a", "column 2: an identifier may not start with a digit"},
        InvalidCase{"a 3+ -> a", "column 4: flag '+' may only follow an identifier"},
        InvalidCase{"a & b -> a", "column 3: unexpected '&'"},
        InvalidCase{"a -> a b c)", "column 11: unexpected ')'"},
        InvalidCase{"", "column 1: expected ',' or '->'"}));

// Random valid annotations: parse(print(a)) == a and print(parse(print(a))) == print(a).
class AnnotationGenerator {
 public:
  explicit AnnotationGenerator(std::uint32_t seed) : rng_(seed) {}

  Annotation next() {
    Annotation a;
    pool_.clear();
    flags_.clear();
    const int n_in = uniform(1, 3), n_out = uniform(1, 2);
    for (int i = 0; i < n_in; ++i) a.inputs.push_back(tensor(/*is_input=*/true, false));
    bool any_variadic = false;
    for (const TensorAnnotation& t : a.inputs) any_variadic |= t.has_variadic();
    for (int i = 0; i < n_out; ++i) a.outputs.push_back(tensor(/*is_input=*/false, any_variadic));
    return a;
  }

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  DimAtom identifier(bool is_input) {
    // Reuse names so that identifiers repeat across tensors; a name keeps one flag everywhere.
    static const char* kNames[] = {"a", "b", "k", "n", "h", "d", "seq", "x_1", "_t"};
    DimAtom atom;
    atom.name = kNames[uniform(0, 8)];
    auto it = flags_.find(atom.name);
    if (it == flags_.end()) {
      const int roll = uniform(0, 5);
      DimFlag flag = roll == 0 ? DimFlag::reduce : roll == 1 ? DimFlag::frozen : DimFlag::none;
      it = flags_.emplace(atom.name, flag).first;
    }
    atom.flag = it->second;
    if (!is_input && atom.flag == DimFlag::reduce) atom.flag = DimFlag::none;  // caller rejects it
    return atom;
  }

  TensorAnnotation tensor(bool is_input, bool variadic_allowed) {
    TensorAnnotation t;
    if (is_input && uniform(0, 9) == 0) {
      t.opaque = true;
      return t;
    }
    const int rank = uniform(0, 4);
    bool used_variadic = false;
    std::vector<std::string> seen;
    for (int i = 0; i < rank; ++i) {
      const int kind = uniform(0, 9);
      AnnotatedDim dim;
      if (kind == 0 && !used_variadic && (is_input || variadic_allowed)) {
        dim.atoms.push_back(DimAtom{DimAtom::Kind::variadic, "", 0, DimFlag::none});
        used_variadic = true;
      } else if (kind == 1) {
        dim.atoms.push_back(DimAtom{DimAtom::Kind::number, "", uniform(1, 4096), DimFlag::none});
      } else {
        const int parts = kind == 2 ? uniform(2, 3) : 1;
        for (int p = 0; p < parts; ++p) {
          DimAtom atom = identifier(is_input);
          if (std::find(seen.begin(), seen.end(), atom.name) != seen.end()) continue;
          if (!is_input && flags_[atom.name] == DimFlag::reduce) continue;
          seen.push_back(atom.name);
          dim.atoms.push_back(atom);
        }
        if (dim.atoms.empty()) continue;
      }
      t.dims.push_back(std::move(dim));
    }
    return t;
  }

  std::mt19937 rng_;
  std::vector<std::string> pool_;
  std::map<std::string, DimFlag> flags_;
};

TEST(AnnotationProperty, RandomValidAnnotationsRoundTrip) {
  const std::uint32_t seed = 20261122;
  AnnotationGenerator generator(seed);
  int checked = 0;
  for (int i = 0; i < 5000; ++i) {
    Annotation a = generator.next();
    if (!check_annotation(a)) continue;  // e.g. an identifier flagged '+' only in a later input
    const std::string text = to_string(a);
    auto parsed = parse_annotation(text);
    ASSERT_TRUE(parsed) << "seed " << seed << " case " << i << ": '" << text << "': " << parsed.error().to_string();
    EXPECT_EQ(*parsed, a) << "seed " << seed << " case " << i << ": '" << text << "'";
    EXPECT_EQ(to_string(*parsed), text) << "seed " << seed << " case " << i;
    ++checked;
  }
  EXPECT_GT(checked, 3000) << "the generator should mostly produce valid annotations";
}

}  // namespace
}  // namespace loom::ir
