// Model files: a models::ModelSpec as YAML (JSON is YAML too, so .json files read the same way), one
// mapping of a family and its fields. The format and each family's fields are in docs/models.md;
// `loom models --write-files DIR` writes every preset in it (the models/ folder of the repository).
//
//   family: gpt
//   name: gpt3-1.3b
//   layers: 24
//   hidden: 2048
//   heads: 16
//
// Strict: an unknown key, a key given twice, a value that is not a positive number, a field the family
// lacks and sizes that do not fit together (heads not dividing hidden, ...) are errors naming the file and
// the field, never ignored.
#pragma once

#include <string>
#include <string_view>

#include "loom/core/error.h"
#include "loom/models/model_spec.h"
#include "loom/models/zoo.h"

namespace loom::frontend {

// The spec a model file states, as written: fields left out stay 0 (the family's defaults). Errors name
// `source` (the path, or e.g. "<string>") and the field.
Expected<models::ModelSpec> parse_model_yaml(std::string_view text, std::string_view source);

// Reads `path`, parses it and makes its preset (models::preset_of): the one call `--model-file` makes.
Expected<models::ModelPreset> load_model_file(const std::string& path);

// The spec as a model file: its given fields in spec_fields() order, numbers in the shortest text that reads
// back exactly, so parse_model_yaml(model_to_yaml(s)) == s.
std::string model_to_yaml(const models::ModelSpec& spec);

}  // namespace loom::frontend
