// Builds a forward Graph op by op, resolving each op against the catalog (shape inference from the
// annotation). The first error sticks: later calls are ignored and finish() returns that error, so
// model code reads as a plain sequence of ops while bad sizes still come back as values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"

namespace loom::ir {

class GraphBuilder {
 public:
  GraphBuilder(std::string graph_name, const OpCatalog& catalog);

  TensorId input(const std::string& name, Shape shape, DType dtype);
  TensorId parameter(const std::string& name, Shape shape, DType dtype);
  TensorId buffer(const std::string& name, Shape shape, DType dtype);
  // A scalar f32 input its provider computes from another input (a loss's counted tokens, ir/derived_input.h).
  TensorId derived_input(const std::string& name, DerivedInput derived);

  // Appends an op named scope + name and returns its outputs (invalid ids after an error).
  std::vector<TensorId> ops(const std::string& type, const std::string& name, const std::vector<TensorId>& inputs,
                            Attrs attrs = {});
  // Single-output form: the first output.
  TensorId op(const std::string& type, const std::string& name, const std::vector<TensorId>& inputs,
              Attrs attrs = {});

  void set_loss(TensorId loss);
  void set_pass(Pass pass) { pass_ = pass; }  // pass of the ops appended from now on

  // Hierarchical names: while a Scope lives, names get its prefix ("layers.3." + "attn").
  class Scope {
   public:
    Scope(GraphBuilder& builder, const std::string& name);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    GraphBuilder& builder_;
  };
  Scope scope(const std::string& name) { return Scope(*this, name); }
  std::string qualified(const std::string& name) const;

  const Shape& shape(TensorId id) const { return graph_.tensor(id).shape; }
  DType dtype(TensorId id) const { return graph_.tensor(id).dtype; }
  TensorRole role(TensorId id) const { return graph_.tensor(id).role; }
  bool ok() const { return !error_.has_value(); }
  // Records an error found by the model code itself (e.g. a bad option); the first one sticks.
  void set_error(Error error);

  Expected<Graph> finish() &&;

 private:
  TensorId add_leaf(const std::string& name, Shape shape, DType dtype, TensorRole role);

  Graph graph_;
  const OpCatalog& catalog_;
  std::vector<std::string> scopes_;
  Pass pass_ = Pass::forward;
  std::optional<Error> error_;
};

}  // namespace loom::ir
