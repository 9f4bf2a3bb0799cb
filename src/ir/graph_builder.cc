#include "loom/ir/graph_builder.h"

#include "loom/core/strings.h"

namespace loom::ir {

GraphBuilder::GraphBuilder(std::string graph_name, const OpCatalog& catalog) : catalog_(catalog) {
  graph_.name = std::move(graph_name);
}

GraphBuilder::Scope::Scope(GraphBuilder& builder, const std::string& name) : builder_(builder) {
  builder_.scopes_.push_back(name);
}
GraphBuilder::Scope::~Scope() { builder_.scopes_.pop_back(); }

std::string GraphBuilder::qualified(const std::string& name) const {
  if (scopes_.empty()) return name;
  return join(scopes_, ".") + "." + name;
}

void GraphBuilder::set_error(Error error) {
  if (!error_) error_ = std::move(error);
}

TensorId GraphBuilder::add_leaf(const std::string& name, Shape shape, DType dtype, TensorRole role) {
  if (!ok()) return {};
  for (std::int64_t d : shape.dims)
    if (d <= 0) {
      set_error(Error{fmt::format("{} '{}' has non-positive size {} in shape {}", ir::name(role), qualified(name), d,
                                  shape.to_string()),
                      "check the model options (batch, sequence length, hidden size)"});
      return {};
    }
  if (!shape.within_limits()) {
    set_error(Error{fmt::format("{} '{}' of shape {} has more than 2^48 elements", ir::name(role), qualified(name),
                                shape.to_string()),
                    "check the model options (batch, sequence length, hidden size)"});
    return {};
  }
  TensorId id = graph_.add_tensor(FullTensor{{}, qualified(name), std::move(shape), dtype, role, {}, {}});
  if (role == TensorRole::input) graph_.inputs.push_back(id);
  if (role == TensorRole::parameter) graph_.parameters.push_back(id);
  return id;
}

TensorId GraphBuilder::input(const std::string& name, Shape shape, DType dtype) {
  return add_leaf(name, std::move(shape), dtype, TensorRole::input);
}
TensorId GraphBuilder::derived_input(const std::string& name, DerivedInput derived) {
  const TensorId id = add_leaf(name, Shape{}, DType::f32, TensorRole::input);
  if (id.valid()) graph_.tensors[id.index()].derived = std::move(derived);
  return id;
}
TensorId GraphBuilder::parameter(const std::string& name, Shape shape, DType dtype) {
  return add_leaf(name, std::move(shape), dtype, TensorRole::parameter);
}
TensorId GraphBuilder::buffer(const std::string& name, Shape shape, DType dtype) {
  return add_leaf(name, std::move(shape), dtype, TensorRole::buffer);
}

std::vector<TensorId> GraphBuilder::ops(const std::string& type, const std::string& name,
                                        const std::vector<TensorId>& inputs, Attrs attrs) {
  if (!ok()) return {};
  const std::string op_name = qualified(name);
  const OpDef* def = catalog_.find(type);
  if (def == nullptr) {
    set_error(Error{fmt::format("op '{}': unknown op type '{}'", op_name, type), "`loom ops` lists the known types"});
    return {};
  }
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (TensorId in : inputs) {
    if (!in.valid() || in.index() >= graph_.tensors.size()) {
      set_error(Error{fmt::format("op '{}' reads an invalid tensor", op_name), {}});
      return {};
    }
    shapes.push_back(graph_.tensor(in).shape);
    dtypes.push_back(graph_.tensor(in).dtype);
  }
  Expected<ResolvedOp> resolved = resolve_op(*def, attrs, shapes, dtypes);
  if (!resolved) {
    set_error(with_context(resolved.error(), fmt::format("op '{}' ({})", op_name, type)));
    return {};
  }
  Op op;
  op.name = op_name;
  op.type = type;
  op.inputs = inputs;
  op.attrs = std::move(attrs);
  op.annotation = resolved->annotation_text;
  op.pass = pass_;
  const std::size_t n_out = resolved->output_shapes.size();
  for (std::size_t i = 0; i < n_out; ++i) {
    const std::string tensor_name = n_out == 1 ? op_name : fmt::format("{}:{}", op_name, i);
    op.outputs.push_back(graph_.add_tensor(FullTensor{{}, tensor_name, std::move(resolved->output_shapes[i]),
                                                      resolved->output_dtypes[i], TensorRole::activation, {}, {}}));
  }
  std::vector<TensorId> outputs = op.outputs;
  graph_.add_op(std::move(op));
  return outputs;
}

TensorId GraphBuilder::op(const std::string& type, const std::string& name, const std::vector<TensorId>& inputs,
                          Attrs attrs) {
  std::vector<TensorId> outputs = ops(type, name, inputs, std::move(attrs));
  return outputs.empty() ? TensorId{} : outputs.front();
}

void GraphBuilder::set_loss(TensorId loss) {
  if (!ok()) return;
  if (!loss.valid() || graph_.tensor(loss).shape.rank() != 0) {
    set_error(Error{"the loss must be a scalar tensor", {}});
    return;
  }
  graph_.loss = loss;
}

Expected<Graph> GraphBuilder::finish() && {
  if (error_) return std::unexpected(*error_);
  LOOM_RETURN_IF_ERROR(check_structure(graph_));
  return std::move(graph_);
}

}  // namespace loom::ir
