// The dimension-annotation language (docs/annotations.md): an einops-like signature per operator,
// e.g. matmul "m k+, k+ n -> m n". Shape inference, partition algorithms, FLOP counts and backward
// rules derive from it.
//
//   annotation := side '->' side
//   side       := tensor (',' tensor)*
//   tensor     := '?' | dim*                 no dims: a scalar
//   dim        := atom | '(' atom atom+ ')'  merged: only the first identifier may be split
//   atom       := IDENT ['+' | '^'] | NUMBER | '*'
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"

namespace loom::ir {

enum class DimFlag : std::uint8_t {
  none,    // may be split; outputs keep the split
  reduce,  // '+': may be split; outputs become value parts (partial sums)
  frozen,  // '^': must not be split
};

struct DimAtom {
  enum class Kind : std::uint8_t { identifier, number, variadic };
  Kind kind = Kind::identifier;
  std::string name;        // identifier
  std::int64_t size = 0;   // number
  DimFlag flag = DimFlag::none;

  bool operator==(const DimAtom&) const = default;
};

// One dimension of a tensor: one atom, or several merged "(h d)" (the first varies slowest).
struct AnnotatedDim {
  std::vector<DimAtom> atoms;

  bool merged() const { return atoms.size() > 1; }
  bool operator==(const AnnotatedDim&) const = default;
};

struct TensorAnnotation {
  bool opaque = false;  // '?': a non-tensor or replicate-only input, never split
  std::vector<AnnotatedDim> dims;

  bool has_variadic() const;
  bool operator==(const TensorAnnotation&) const = default;
};

struct Annotation {
  std::vector<TensorAnnotation> inputs;
  std::vector<TensorAnnotation> outputs;

  // Identifiers in first-appearance order, and the flag each carries (none if never flagged).
  std::vector<std::string> identifiers() const;
  DimFlag flag_of(std::string_view identifier) const;
  bool operator==(const Annotation&) const = default;
};

// Parses and checks. Errors quote the text and name the column (1-based) and the rule broken.
Expected<Annotation> parse_annotation(std::string_view text);

// Canonical form: single spaces between dims, ", " between tensors, " -> " between sides.
// parse_annotation(to_string(a)) == a for every valid a.
std::string to_string(const Annotation& annotation);
std::string to_string(const TensorAnnotation& tensor);

// The semantic rules (parse_annotation applies them; exposed for annotations built in code).
Expected<void> check_annotation(const Annotation& annotation);

}  // namespace loom::ir
