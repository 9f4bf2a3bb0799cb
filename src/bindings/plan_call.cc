#include "plan_call.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "loom/api/baseline_search.h"

namespace loom::bindings {
namespace {

// A file holding the graph JSON for the duration of one plan; removed with the object.
class GraphTempFile {
 public:
  static Expected<GraphTempFile> write(const std::string& text) {
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
    if (ec) return fail(fmt::format("no temporary directory for the graph JSON: {}", ec.message()), "set TMPDIR");
    std::string pattern = (dir / "loom-graph-XXXXXX.json").string();
    const int fd = mkstemps(pattern.data(), 5);
    if (fd < 0) return fail(fmt::format("cannot create a temporary file in {} for the graph JSON", dir.string()));
    ::close(fd);
    GraphTempFile file(pattern);
    std::ofstream out(pattern, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) return fail(fmt::format("cannot write the graph JSON to {}", pattern), "check the free disk space");
    return file;
  }
  GraphTempFile(GraphTempFile&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  GraphTempFile(const GraphTempFile&) = delete;
  GraphTempFile& operator=(const GraphTempFile&) = delete;
  GraphTempFile& operator=(GraphTempFile&&) = delete;
  ~GraphTempFile() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove(path_, ec);
    }
  }
  const std::string& path() const { return path_; }

 private:
  explicit GraphTempFile(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

Expected<std::unique_ptr<api::PlanResult>> plan_or_search(const api::PlanRequest& request) {
  if (!api::is_baseline(request.policy)) return api::plan_model(request);
  LOOM_ASSIGN_OR_RETURN(api::BaselineResult searched, api::best_baseline(request, request.policy));
  return std::move(searched.best);
}

}  // namespace

Expected<std::unique_ptr<api::PlanResult>> plan_call(api::PlanRequest request, const std::string& graph_json) {
  if (graph_json.empty()) return plan_or_search(request);
  if (!request.graph_file.empty() || !request.model.empty())
    return fail("give one of a model preset, a graph file or a graph JSON text", "pass only one of them");
  LOOM_ASSIGN_OR_RETURN(GraphTempFile file, GraphTempFile::write(graph_json));
  request.graph_file = file.path();
  Expected<std::unique_ptr<api::PlanResult>> result = plan_or_search(request);
  if (!result) {
    Error error = std::move(result).error();
    replace_all(error.message, file.path(), "the graph JSON");
    return std::unexpected(std::move(error));
  }
  (*result)->request.graph_file.clear();  // the file is gone with this call
  return result;
}

}  // namespace loom::bindings
