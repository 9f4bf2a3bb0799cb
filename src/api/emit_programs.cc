#include "loom/api/emit_programs.h"

#include "loom/codegen/rank_programs.h"

namespace loom::api {

Expected<void> add_rank_programs(const Job& r, const std::string& dir, OutputSet& set) {
  if (r.stage < Stage::materialized) return fail("the rank programs need a materialized job", "run materialize(job)");
  if (r.folded)
    return fail("--emit needs every rank's program, but this plan is folded (one micro-batch of one replica)",
                "add --fold off");
  LOOM_ASSIGN_OR_RETURN(codegen::RankPrograms programs, codegen::emit_rank_programs(r.exec, r.description));
  for (std::size_t rank = 0; rank < programs.modules.size(); ++rank) {
    const std::string name = codegen::rank_module_file(static_cast<int>(rank));
    set.add(dir, name, std::move(programs.modules[rank]), name);
  }
  set.remove_stale(dir, "rank_", ".py");  // an earlier emit's programs beyond this plan's ranks
  // Last: renamed into place after the programs it lists.
  set.add(dir, "manifest.json", std::move(programs.manifest), "manifest.json");
  return {};
}

Expected<std::vector<std::string>> write_rank_programs(const Job& r, const std::string& dir) {
  OutputSet set;
  LOOM_RETURN_IF_ERROR(add_rank_programs(r, dir, set));
  return set.commit();
}

}  // namespace loom::api
