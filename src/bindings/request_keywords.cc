#include "request_keywords.h"

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/core/suggest.h"
#include "raise.h"

namespace py = pybind11;

namespace loom::bindings {
namespace {

std::string_view kind_name(api::ValueKind kind) {
  switch (kind) {
    case api::ValueKind::whole: return "an int";
    case api::ValueKind::real: return "a float";
    case api::ValueKind::flag: return "a bool";
    case api::ValueKind::text: return "a str";
  }
  return "?";
}

// The value as the text the field parses, or a TypeError when its type does not fit the field.
std::string text_of(const api::OptionField& field, const std::string& keyword, const py::handle& value) {
  const auto wrong = [&] {
    return py::type_error(fmt::format("keyword {} takes {}, not {} ({})", keyword, kind_name(field.kind),
                                      py::str(py::type::of(value).attr("__name__")).cast<std::string>(),
                                      py::repr(value).cast<std::string>()));
  };
  // bool is an int in Python: tell them apart first.
  if (py::isinstance<py::bool_>(value)) {
    if (field.kind != api::ValueKind::flag) throw wrong();
    return value.cast<bool>() ? "true" : "false";
  }
  if (py::isinstance<py::int_>(value)) {
    if (field.kind != api::ValueKind::whole && field.kind != api::ValueKind::real) throw wrong();
    return py::str(value).cast<std::string>();
  }
  if (py::isinstance<py::float_>(value)) {
    if (field.kind != api::ValueKind::real) throw wrong();
    return py::repr(value).cast<std::string>();
  }
  if (py::isinstance<py::str>(value)) {
    if (field.kind != api::ValueKind::text) throw wrong();
    return value.cast<std::string>();
  }
  throw wrong();
}

}  // namespace

api::JobOptions job_options(const py::kwargs& keywords) {
  api::JobOptions options;
  for (const auto& [key, value] : keywords) {
    const std::string keyword = py::str(key).cast<std::string>();
    if (value.is_none()) continue;
    if (keyword == "graph") {
      options.graph_text = value.cast<std::string>();
      continue;
    }
    const api::OptionField* field = api::find_option(keyword);
    if (field == nullptr || keyword.starts_with("--")) {
      std::vector<std::string> known{"graph"};
      for (const api::OptionField& f : api::option_fields()) known.emplace_back(f.keyword);
      const std::string guess = did_you_mean(keyword, known);
      throw py::type_error(fmt::format("plan() got an unexpected keyword '{}' ({})", keyword,
                                       guess.empty() ? "known: " + join(known, ", ") : guess));
    }
    if (Expected<void> set = api::set_option(options, keyword, text_of(*field, keyword, value)); !set) raise(set.error());
  }
  return options;
}

py::dict keyword_table() {
  const api::JobOptions defaults;
  py::dict table;
  table["graph"] = py::make_tuple("", "the traced graph's JSON text (loom.trace), instead of model or graph_file");
  for (const api::OptionField& f : api::option_fields())
    table[py::str(std::string(f.keyword))] = py::make_tuple(f.get(defaults), std::string(f.help));
  return table;
}

}  // namespace loom::bindings
