// Reads an ONNX model (a ModelProto, e.g. from torch.onnx.export) into the engine's forward Graph: each
// node becomes registry ops (docs/onnx.md lists the mapping), initializers become parameters, the graph's
// inputs its inputs and its one scalar output the loss. Computations on constants (shapes, masks) are
// folded while reading, so the Graph holds only the model's tensor work. Errors name the file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "loom/core/error.h"
#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"

namespace loom::frontend {

struct OnnxOptions {
  // Sizes of symbolic input dims (dim_param), by name: {"batch": 8}. Default: none; a symbolic dim
  // without a size is an error naming the input and the dim.
  std::map<std::string, std::int64_t, std::less<>> dims;
};

// "batch=8,seq=128" (the --onnx-dim option): each name once, each value positive.
Expected<OnnxOptions> parse_onnx_dims(std::string_view text);

// Whether `path` names an ONNX file (ends with ".onnx"): `--graph` and `--from` pick the reader by it.
bool is_onnx_path(std::string_view path);

Expected<ir::Graph> load_onnx_file(const std::string& path, const ir::OpCatalog& catalog,
                                   const OnnxOptions& options = {});

// The same from the serialized ModelProto's bytes; errors name it by `label`.
Expected<ir::Graph> onnx_to_graph(const std::string& bytes, const std::string& label, const ir::OpCatalog& catalog,
                                  const OnnxOptions& options = {});

}  // namespace loom::frontend
