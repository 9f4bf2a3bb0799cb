// IOPDDL instances (`loom solve-iopddl FILE`): search::parse_iopddl, which read_iopddl calls on the file's
// bytes once a gzip file is inflated (zlib's own inflate, bounded by kMaxIopddlBytes, is not fuzzed here).
#include "fuzz_input.h"
#include "loom/search/iopddl_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)loom::search::parse_iopddl(loom::fuzz::text_of(data, size), "<fuzz>");
  return 0;
}
