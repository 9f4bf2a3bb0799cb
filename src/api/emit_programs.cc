#include "loom/api/emit_programs.h"

#include <filesystem>

#include <fmt/format.h>

#include "loom/codegen/rank_programs.h"
#include "loom/core/atomic_file.h"

namespace loom::api {

Expected<std::vector<std::string>> write_rank_programs(const Job& r, const std::string& dir) {
  if (r.stage < Stage::materialized) return fail("the rank programs need a materialized job", "run materialize(job)");
  if (r.folded)
    return fail("--emit needs every rank's program, but this plan is folded (one micro-batch of one replica)",
                "add --fold off");
  LOOM_ASSIGN_OR_RETURN(codegen::RankPrograms programs, codegen::emit_rank_programs(r.exec, r.description));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(fmt::format("cannot create the --emit directory '{}': {}", dir, ec.message()));
  std::vector<std::string> paths;
  for (std::size_t rank = 0; rank < programs.modules.size(); ++rank) {
    const std::string name = codegen::rank_module_file(static_cast<int>(rank));
    const std::string path = (std::filesystem::path(dir) / name).string();
    LOOM_RETURN_IF_ERROR(write_file_atomically(path, programs.modules[rank], name));
    paths.push_back(path);
  }
  const std::string path = (std::filesystem::path(dir) / "manifest.json").string();
  LOOM_RETURN_IF_ERROR(write_file_atomically(path, programs.manifest, "manifest.json"));
  paths.push_back(path);
  return paths;
}

}  // namespace loom::api
