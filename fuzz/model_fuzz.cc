// Model files (--model-file): frontend::parse_model_yaml, then the preset it makes (models::preset_of), as
// load_model_file does. Law: parse_model_yaml(model_to_yaml(s)) == s (model_file.h).
#include "fuzz_input.h"
#include "loom/frontend/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = loom::fuzz::text_of(data, size);
  const loom::Expected<loom::models::ModelSpec> spec = loom::frontend::parse_model_yaml(text, "<fuzz>");
  if (!spec) return 0;
  const auto again = loom::frontend::parse_model_yaml(loom::frontend::model_to_yaml(*spec), "<printed>");
  LOOM_FUZZ_LAW(again && *again == *spec);
  (void)loom::models::preset_of(*spec, loom::models::FieldNaming::file_key);
  return 0;
}
