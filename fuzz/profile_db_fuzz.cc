// Profile databases (--profile FILE, `loom profile --db FILE`): cost::ProfileDb::parse, which
// ProfileDb::load calls on the file's bytes. Law: a database read back from its JSON is the same.
#include "fuzz_input.h"
#include "loom/cost/profile_db.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = loom::fuzz::text_of(data, size);
  const loom::Expected<loom::cost::ProfileDb> db = loom::cost::ProfileDb::parse(text, "<fuzz>");
  if (!db) return 0;
  const loom::Expected<loom::cost::ProfileDb> again = loom::cost::ProfileDb::parse(db->to_json(), "<printed>");
  LOOM_FUZZ_LAW(again && again->entries() == db->entries());
  return 0;
}
