// Graph files: the engine's JSON graph on disk. Reading parses then validates; writing goes through
// a temporary file renamed into place, so readers never see half a graph.
#include "loom/frontend/graph_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "loom/core/atomic_file.h"
#include "loom/ir/graph_json.h"
#include "loom/ir/validate.h"

namespace loom::frontend {
namespace {

Expected<std::string> read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return fail(fmt::format("{}: is a directory, not a graph file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(fmt::format("{}: cannot open the graph file ({})", path, std::strerror(errno)),
                       "check the path; `loom graph --json` writes one");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return fail(fmt::format("{}: error while reading the graph file", path));
  return std::move(text).str();
}

}  // namespace

Expected<ir::Graph> load_graph_file(const std::string& path, const ir::OpCatalog& catalog) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  Expected<ir::Graph> graph = ir::graph_from_json(text);
  if (!graph) return std::unexpected(with_context(std::move(graph).error(), path));
  if (Expected<void> valid = ir::validate_graph(*graph, catalog); !valid)
    return std::unexpected(with_context(std::move(valid).error(), path));
  return graph;
}

Expected<void> save_graph_file(const ir::Graph& graph, const std::string& path) {
  return write_file_atomically(path, ir::graph_to_json(graph), "the graph");
}

}  // namespace loom::frontend
