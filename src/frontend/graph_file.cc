// Graph files: the engine's JSON graph on disk. Reading parses then validates; writing goes through
// a temporary file renamed into place, so readers never see half a graph.
#include "loom/frontend/graph_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

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

// Where the graph is written before the rename: beside the target, so the rename stays on one file system.
std::string temporary_path(const std::string& path) { return fmt::format("{}.tmp.{}", path, ::getpid()); }

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
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(directory, ec))
    return fail(fmt::format("{}: cannot write the graph: directory '{}' does not exist", path, directory.string()),
                "create the directory first");
  if (fs::is_directory(target, ec)) return fail(fmt::format("{}: cannot write the graph: it is a directory", path));

  const std::string text = ir::graph_to_json(graph);
  const std::string temporary = temporary_path(path);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out)
      return fail(fmt::format("{}: cannot create '{}' ({})", path, temporary, std::strerror(errno)),
                  "check that the directory is writable");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();  // explicitly, so that a failed final flush is seen
    if (!out) {
      std::remove(temporary.c_str());
      return fail(fmt::format("{}: writing '{}' failed (disk full?)", path, temporary));
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int saved_errno = errno;
    std::remove(temporary.c_str());
    return fail(fmt::format("{}: cannot move '{}' into place ({})", path, temporary, std::strerror(saved_errno)));
  }
  return {};
}

}  // namespace loom::frontend
