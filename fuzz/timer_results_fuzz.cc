// The op timer's results file (`loom profile --results FILE`, and what python/loom_profile writes):
// cost::parse_timer_results, as profile_command.cc calls it on the file's bytes.
#include "fuzz_input.h"
#include "loom/cost/profile_requests.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = loom::fuzz::text_of(data, size);
  (void)loom::cost::parse_timer_results(text, "<fuzz>", "");
  (void)loom::cost::parse_timer_results(text, "<fuzz>", "A100-SXM4-80GB");
  return 0;
}
