#include "loom/ir/annotation.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "loom/core/strings.h"

namespace loom::ir {

bool TensorAnnotation::has_variadic() const {
  return std::any_of(dims.begin(), dims.end(), [](const AnnotatedDim& d) {
    return d.atoms.size() == 1 && d.atoms[0].kind == DimAtom::Kind::variadic;
  });
}

std::vector<std::string> Annotation::identifiers() const {
  std::vector<std::string> names;
  const auto visit = [&](const std::vector<TensorAnnotation>& side) {
    for (const TensorAnnotation& t : side)
      for (const AnnotatedDim& d : t.dims)
        for (const DimAtom& a : d.atoms)
          if (a.kind == DimAtom::Kind::identifier && std::find(names.begin(), names.end(), a.name) == names.end())
            names.push_back(a.name);
  };
  visit(inputs);
  visit(outputs);
  return names;
}

DimFlag Annotation::flag_of(std::string_view identifier) const {
  for (const auto* side : {&inputs, &outputs})
    for (const TensorAnnotation& t : *side)
      for (const AnnotatedDim& d : t.dims)
        for (const DimAtom& a : d.atoms)
          if (a.kind == DimAtom::Kind::identifier && a.name == identifier && a.flag != DimFlag::none) return a.flag;
  return DimFlag::none;
}

namespace {

std::string atom_text(const DimAtom& atom) {
  switch (atom.kind) {
    case DimAtom::Kind::variadic: return "*";
    case DimAtom::Kind::number: return std::to_string(atom.size);
    case DimAtom::Kind::identifier:
      return atom.name + (atom.flag == DimFlag::reduce ? "+" : atom.flag == DimFlag::frozen ? "^" : "");
  }
  return "";
}

std::string side_text(const std::vector<TensorAnnotation>& side) {
  std::vector<std::string> parts;
  for (const TensorAnnotation& t : side) parts.push_back(to_string(t));
  return join(parts, ", ");
}

// Recursive-descent parser over the raw text, keeping columns for messages.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Expected<Annotation> parse() {
    Annotation result;
    LOOM_ASSIGN_OR_RETURN(result.inputs, parse_side(/*is_input=*/true));
    skip_space();
    if (!consume("->")) return error(pos_, "expected ',' or '->'");
    LOOM_ASSIGN_OR_RETURN(result.outputs, parse_side(/*is_input=*/false));
    skip_space();
    if (pos_ != text_.size()) return error(pos_, fmt::format("unexpected '{}'", text_[pos_]));
    return result;
  }

 private:
  Expected<std::vector<TensorAnnotation>> parse_side(bool is_input) {
    std::vector<TensorAnnotation> side;
    while (true) {
      LOOM_ASSIGN_OR_RETURN(TensorAnnotation tensor, parse_tensor(is_input));
      side.push_back(std::move(tensor));
      skip_space();
      if (!consume(",")) break;
    }
    return side;
  }

  Expected<TensorAnnotation> parse_tensor(bool is_input) {
    TensorAnnotation tensor;
    skip_space();
    if (peek() == '?') {
      if (!is_input) return error(pos_, "'?' (non-tensor input) may only appear before '->'");
      ++pos_;
      tensor.opaque = true;
      return tensor;
    }
    while (true) {
      skip_space();
      const char c = peek();
      if (c == '\0' || c == ',' || c == '-') return tensor;
      if (c == '(') {
        const std::size_t open = pos_++;
        AnnotatedDim dim;
        while (true) {
          skip_space();
          if (peek() == ')') break;
          if (peek() == '\0' || peek() == ',' || peek() == '-') return error(open, "'(' is never closed");
          LOOM_ASSIGN_OR_RETURN(DimAtom atom, parse_atom());
          if (atom.kind == DimAtom::Kind::variadic) return error(pos_ - 1, "'*' cannot be merged inside '( )'");
          dim.atoms.push_back(std::move(atom));
        }
        ++pos_;  // ')'
        if (dim.atoms.size() < 2) return error(open, "a merged dimension '( )' needs at least two atoms");
        tensor.dims.push_back(std::move(dim));
      } else {
        LOOM_ASSIGN_OR_RETURN(DimAtom atom, parse_atom());
        tensor.dims.push_back(AnnotatedDim{{std::move(atom)}});
      }
    }
  }

  Expected<DimAtom> parse_atom() {
    DimAtom atom;
    const std::size_t start = pos_;
    const char c = peek();
    if (c == '*') {
      ++pos_;
      atom.kind = DimAtom::Kind::variadic;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
      const std::string_view digits = text_.substr(start, pos_ - start);
      if (digits.size() > 15) return error(start, fmt::format("number '{}' is too large", digits));
      atom.kind = DimAtom::Kind::number;
      atom.size = std::stoll(std::string(digits));
      if (atom.size <= 0 || digits[0] == '0') return error(start, fmt::format("size '{}' must be a positive number without leading zeros", digits));
      if (std::isalpha(static_cast<unsigned char>(peek())) || peek() == '_')
        return error(pos_, "an identifier may not start with a digit");
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_') ++pos_;
      atom.kind = DimAtom::Kind::identifier;
      atom.name = std::string(text_.substr(start, pos_ - start));
      if (peek() == '+' || peek() == '^') atom.flag = text_[pos_++] == '+' ? DimFlag::reduce : DimFlag::frozen;
    } else if (c == '\0') {
      return error(pos_, "unexpected end of annotation");
    } else {
      return error(pos_, fmt::format("unexpected '{}': expected an identifier, a number, '*', '(' or '?'", c));
    }
    if (atom.kind != DimAtom::Kind::identifier && (peek() == '+' || peek() == '^'))
      return error(pos_, fmt::format("flag '{}' may only follow an identifier", peek()));
    return atom;
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool consume(std::string_view token) {
    if (text_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  std::unexpected<Error> error(std::size_t column, std::string what) const {
    return fail(fmt::format("annotation '{}': column {}: {}", text_, column + 1, what),
                "see docs/annotations.md for the grammar");
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

std::string to_string(const TensorAnnotation& tensor) {
  if (tensor.opaque) return "?";
  std::vector<std::string> dims;
  for (const AnnotatedDim& d : tensor.dims) {
    if (!d.merged()) {
      dims.push_back(atom_text(d.atoms[0]));
      continue;
    }
    std::vector<std::string> atoms;
    for (const DimAtom& a : d.atoms) atoms.push_back(atom_text(a));
    dims.push_back("(" + join(atoms, " ") + ")");
  }
  return join(dims, " ");
}

std::string to_string(const Annotation& annotation) {
  return side_text(annotation.inputs) + " -> " + side_text(annotation.outputs);
}

Expected<void> check_annotation(const Annotation& annotation) {
  const std::string text = to_string(annotation);
  const auto bad = [&](std::string what) {
    return fail(fmt::format("annotation '{}': {}", text, what), "see docs/annotations.md for the rules");
  };
  if (annotation.inputs.empty() || annotation.outputs.empty()) return bad("needs at least one input and one output");
  std::map<std::string, DimFlag, std::less<>> explicit_flag;
  bool input_variadic = false;
  for (const auto* side : {&annotation.inputs, &annotation.outputs}) {
    const bool is_input = side == &annotation.inputs;
    for (std::size_t t = 0; t < side->size(); ++t) {
      const TensorAnnotation& tensor = (*side)[t];
      const std::string where = fmt::format("{} {}", is_input ? "input" : "output", t);
      if (tensor.opaque) {
        if (!is_input) return bad(fmt::format("{} is '?', but only inputs may be non-tensors", where));
        if (!tensor.dims.empty()) return bad(fmt::format("{} is '?' and so has no dimensions", where));
        continue;
      }
      std::set<std::string, std::less<>> seen;
      int variadics = 0;
      for (const AnnotatedDim& dim : tensor.dims) {
        if (dim.atoms.empty()) return bad(fmt::format("{} has an empty dimension", where));
        for (const DimAtom& atom : dim.atoms) {
          if (atom.kind == DimAtom::Kind::variadic) {
            if (dim.merged()) return bad(fmt::format("{} merges '*', which cannot be merged", where));
            ++variadics;
            continue;
          }
          if (atom.kind == DimAtom::Kind::number) {
            if (atom.size <= 0) return bad(fmt::format("{} has a non-positive size {}", where, atom.size));
            if (atom.flag != DimFlag::none) return bad(fmt::format("{} flags the number {}", where, atom.size));
            continue;
          }
          if (atom.name.empty()) return bad(fmt::format("{} has an unnamed identifier", where));
          if (!seen.insert(atom.name).second)
            return bad(fmt::format("identifier '{}' appears twice in {}", atom.name, where));
          if (atom.flag != DimFlag::none) {
            auto [it, inserted] = explicit_flag.emplace(atom.name, atom.flag);
            if (!inserted && it->second != atom.flag)
              return bad(fmt::format("identifier '{}' carries different flags ('+' and '^')", atom.name));
          }
        }
      }
      if (variadics > 1) return bad(fmt::format("'*' appears {} times in {}; at most once per tensor", variadics, where));
      if (variadics == 1 && is_input) input_variadic = true;
      if (variadics == 1 && !is_input && !input_variadic)
        return bad(fmt::format("{} uses '*' but no input does, so its size is unknown", where));
    }
  }
  // A reduction identifier never reaches an output, and every input occurrence must say so:
  // a plain 'k' beside 'k+' would be ambiguous.
  for (const auto* side : {&annotation.inputs, &annotation.outputs}) {
    const bool is_input = side == &annotation.inputs;
    for (std::size_t t = 0; t < side->size(); ++t)
      for (const AnnotatedDim& dim : (*side)[t].dims)
        for (const DimAtom& atom : dim.atoms) {
          if (atom.kind != DimAtom::Kind::identifier) continue;
          auto it = explicit_flag.find(atom.name);
          if (it == explicit_flag.end() || it->second != DimFlag::reduce) continue;
          if (!is_input)
            return bad(fmt::format("reduction identifier '{}+' appears in output {}; a reduced dimension cannot be an output", atom.name, t));
          if (atom.flag != DimFlag::reduce)
            return bad(fmt::format("identifier '{}' is marked '+' in one place but not in another; mark every occurrence", atom.name));
        }
  }
  return {};
}

Expected<Annotation> parse_annotation(std::string_view text) {
  LOOM_ASSIGN_OR_RETURN(Annotation annotation, Parser(text).parse());
  LOOM_RETURN_IF_ERROR(check_annotation(annotation));
  return annotation;
}

}  // namespace loom::ir
