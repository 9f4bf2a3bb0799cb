#include "loom/ir/shape_inference.h"

#include <fmt/ranges.h>

#include "loom/core/checked_math.h"

namespace loom::ir {

std::int64_t DimBinding::size(std::string_view identifier) const {
  auto it = sizes.find(identifier);
  return it == sizes.end() ? 0 : it->second;
}

double DimBinding::iteration_space() const {
  double space = 1;
  for (const auto& [name, size] : sizes) space *= static_cast<double>(size);
  for (std::int64_t d : variadic) space *= static_cast<double>(d);
  return space;
}

namespace {

struct Binder {
  const Annotation& annotation;
  std::string text = to_string(annotation);
  DimBinding binding;
  bool variadic_bound = false;
  std::map<std::string, std::string, std::less<>> origin;  // where each size came from, for messages

  std::unexpected<Error> error(std::string what) const {
    return fail(fmt::format("shapes do not match annotation '{}': {}", text, what));
  }

  Expected<void> bind(const std::string& name, std::int64_t size, const std::string& where) {
    auto [it, inserted] = binding.sizes.emplace(name, size);
    if (inserted) {
      origin[name] = where;
      return {};
    }
    if (it->second != size)
      return error(fmt::format("{} ('{}') has size {}, but '{}' is {} from {}", where, name, size, name, it->second,
                               origin[name]));
    return {};
  }

  // Binds what it can of a merged dim; returns true once every atom is known and checked.
  Expected<bool> bind_merged(const AnnotatedDim& dim, std::int64_t size, const std::string& where) {
    std::int64_t known_product = 1;
    const DimAtom* unknown = nullptr;
    int unknown_count = 0;
    for (const DimAtom& atom : dim.atoms) {
      const std::int64_t factor = atom.kind == DimAtom::Kind::number ? atom.size : binding.size(atom.name);
      if (factor > 0) {
        auto product = checked_mul(known_product, factor);
        if (!product || *product > kMaxElements) return error(fmt::format("{}: its merged parts multiply past 2^48", where));
        known_product = *product;
      } else {
        unknown = &atom;
        ++unknown_count;
      }
    }
    if (unknown_count > 1) return false;
    if (unknown_count == 1) {
      if (size % known_product != 0)
        return error(fmt::format("{} has size {}, not divisible by {} for '{}'", where, size, known_product, unknown->name));
      LOOM_RETURN_IF_ERROR(bind(unknown->name, size / known_product, where));
      return true;
    }
    if (known_product != size)
      return error(fmt::format("{} has size {}, but its merged parts multiply to {}", where, size, known_product));
    return true;
  }
};

}  // namespace

Expected<DimBinding> bind_dims(const Annotation& annotation, std::span<const Shape> inputs, const SizeMap& known) {
  Binder b{annotation};
  for (const auto& [name, size] : known) {
    if (size <= 0) return b.error(fmt::format("size of '{}' must be positive, got {}", name, size));
    b.binding.sizes[name] = size;
    b.origin[name] = "the operator's attributes";
  }
  if (inputs.size() != annotation.inputs.size())
    return b.error(fmt::format("{} inputs given, the annotation has {}", inputs.size(), annotation.inputs.size()));

  struct Pending {
    const AnnotatedDim* dim;
    std::int64_t size;
    std::string where;
  };
  std::vector<Pending> merged;
  for (std::size_t t = 0; t < inputs.size(); ++t) {
    const TensorAnnotation& tensor = annotation.inputs[t];
    if (tensor.opaque) continue;
    const Shape& shape = inputs[t];
    const bool variadic = tensor.has_variadic();
    const std::size_t fixed = tensor.dims.size() - (variadic ? 1 : 0);
    if (variadic ? shape.rank() < fixed : shape.rank() != fixed)
      return b.error(fmt::format("input {} has shape {} (rank {}), the annotation '{}' wants rank {}{}", t,
                                 shape.to_string(), shape.rank(), to_string(tensor), variadic ? "at least " : "",
                                 fixed));
    const std::size_t variadic_len = shape.rank() - fixed;
    std::size_t axis = 0;
    for (const AnnotatedDim& dim : tensor.dims) {
      const DimAtom& first = dim.atoms[0];
      if (!dim.merged() && first.kind == DimAtom::Kind::variadic) {
        std::vector<std::int64_t> dims(shape.dims.begin() + static_cast<std::ptrdiff_t>(axis),
                                       shape.dims.begin() + static_cast<std::ptrdiff_t>(axis + variadic_len));
        if (b.variadic_bound && dims != b.binding.variadic)
          return b.error(fmt::format("input {}: '*' stands for [{}], but for [{}] in an earlier input", t,
                                     fmt::join(dims, ", "), fmt::join(b.binding.variadic, ", ")));
        b.binding.variadic = std::move(dims);
        b.variadic_bound = true;
        axis += variadic_len;
        continue;
      }
      const std::int64_t size = shape.dims[axis];
      const std::string where = fmt::format("input {} dim {}", t, axis);
      ++axis;
      if (dim.merged()) {
        merged.push_back({&dim, size, where});
      } else if (first.kind == DimAtom::Kind::number) {
        if (size != first.size) return b.error(fmt::format("{} has size {}, the annotation fixes it to {}", where, size, first.size));
      } else {
        LOOM_RETURN_IF_ERROR(b.bind(first.name, size, where));
      }
    }
  }
  // Merged dims may depend on each other's bindings: repeat until no progress.
  while (!merged.empty()) {
    std::vector<Pending> still;
    for (const Pending& p : merged) {
      LOOM_ASSIGN_OR_RETURN(bool done, b.bind_merged(*p.dim, p.size, p.where));
      if (!done) still.push_back(p);
    }
    if (still.size() == merged.size()) {
      const Pending& p = still.front();
      std::vector<std::string> names;
      for (const DimAtom& atom : p.dim->atoms)
        if (atom.kind == DimAtom::Kind::identifier && !b.binding.sizes.contains(atom.name)) names.push_back(atom.name);
      return fail(fmt::format("annotation '{}': {} has merged size {}, and the sizes of {} cannot all be inferred", b.text,
                              p.where, p.size, fmt::join(names, ", ")),
                  "the operator must give all but one of them as attributes");
    }
    merged = std::move(still);
  }
  return b.binding;
}

Expected<std::vector<Shape>> output_shapes(const Annotation& annotation, const DimBinding& binding) {
  std::vector<Shape> shapes;
  for (std::size_t t = 0; t < annotation.outputs.size(); ++t) {
    Shape shape;
    for (const AnnotatedDim& dim : annotation.outputs[t].dims) {
      if (!dim.merged() && dim.atoms[0].kind == DimAtom::Kind::variadic) {
        shape.dims.insert(shape.dims.end(), binding.variadic.begin(), binding.variadic.end());
        continue;
      }
      std::int64_t size = 1;
      for (const DimAtom& atom : dim.atoms) {
        if (atom.kind == DimAtom::Kind::number) {
          size = checked_mul(size, atom.size).value_or(kMaxElements + 1);
          continue;
        }
        const std::int64_t bound = binding.size(atom.name);
        if (bound == 0)
          return fail(fmt::format("annotation '{}': output {} needs the size of '{}', which no input has", to_string(annotation), t,
                                  atom.name),
                      "the operator must give it as an attribute");
        size = checked_mul(size, bound).value_or(kMaxElements + 1);
      }
      shape.dims.push_back(size);
    }
    if (!shape.within_limits())
      return fail(fmt::format("annotation '{}': output {} would have shape {}, more than 2^48 elements", to_string(annotation), t,
                              shape.to_string()),
                  "check the operator's size attributes");
    shapes.push_back(std::move(shape));
  }
  return shapes;
}

Expected<std::vector<Shape>> infer_shapes(const Annotation& annotation, std::span<const Shape> inputs, const SizeMap& known) {
  LOOM_ASSIGN_OR_RETURN(DimBinding binding, bind_dims(annotation, inputs, known));
  return output_shapes(annotation, binding);
}

}  // namespace loom::ir
