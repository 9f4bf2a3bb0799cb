#include "usage_error.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/core/suggest.h"

namespace loom::cli {
namespace {

// The root, then each selected subcommand down to the one the user chose.
std::vector<const CLI::App*> selected_chain(const CLI::App& app) {
  std::vector<const CLI::App*> chain = {&app};
  while (!chain.back()->get_subcommands().empty()) chain.push_back(chain.back()->get_subcommands().front());
  return chain;
}

// "loom plan": how the user names the selected command.
std::string command_path(const std::vector<const CLI::App*>& chain) {
  std::string path = "loom";
  for (std::size_t i = 1; i < chain.size(); ++i) path += " " + chain[i]->get_name();
  return path;
}

// Every option the selected command accepts, its own and those it inherits: "--tp", "-h", ...
std::vector<std::string> option_names(const std::vector<const CLI::App*>& chain) {
  std::vector<std::string> names;
  for (const CLI::App* command : chain)
    for (const CLI::Option* option : command->get_options()) {
      for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
      for (const std::string& name : option->get_snames()) names.push_back("-" + name);
    }
  return names;
}

std::vector<std::string> command_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  return names;
}

const CLI::Option* find_option(const std::vector<const CLI::App*>& chain, const std::string& name) {
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    if (const CLI::Option* option = (*it)->get_option_no_throw(name)) return option;
  return nullptr;
}

// The options CLI11's message is about, in its order: it names them as "--tp", "--tp:" or "--tp," in the text.
std::vector<const CLI::Option*> options_in_message(const std::vector<const CLI::App*>& chain,
                                                   std::string_view message) {
  std::vector<const CLI::Option*> options;
  for (std::string word : split(message, ' ')) {
    while (!word.empty() && (word.back() == ':' || word.back() == ',')) word.pop_back();
    if (word.size() >= 2 && word.front() == '-')
      if (const CLI::Option* option = find_option(chain, word)) options.push_back(option);
  }
  return options;
}

// What the option takes, as `--help` shows it: "INT in [1 - 1048576]", "{auto,on,off}", "TEXT".
std::string takes(const CLI::Option& option) {
  const std::string type = option.get_type_name();
  const std::size_t colon = type.find(':');
  return colon == std::string::npos ? type : type.substr(colon + 1);
}

std::string option_hint(const CLI::Option& option) {
  std::string hint = fmt::format("{} takes {}", option.get_name(), takes(option));
  if (!option.get_description().empty()) hint += fmt::format(" ({})", option.get_description());
  return hint;
}

bool is_integer(std::string_view text) {
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) text.remove_prefix(1);
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return false;
  std::size_t used = 0;
  try {
    (void)std::stod(text, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == text.size();
}

// CLI11 starts its sentences with a capital; Loom's messages continue "loom: error: " in lower case.
std::string lower_first(std::string_view text) {
  std::string out(text);
  if (!out.empty()) out[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(out[0])));
  return out;
}

// CLI11's own words after "--tp: ": "value 0 not in range 1 to 1048576".
std::string detail_after_name(std::string_view message, const std::string& name) {
  if (message.starts_with(name + ": ")) message.remove_prefix(name.size() + 2);
  return lower_first(message);
}

// A value the option refused, naming it in the user's own spelling ("'2 ' is not an integer").
Error bad_value(const CLI::Option& option, std::string_view message) {
  const std::string name = option.get_name();
  const std::string type = option.get_type_name();
  const std::string value = option.results().empty() ? std::string{} : option.results().back();
  if ((type.starts_with("INT") || type.starts_with("UINT")) && !is_integer(value))
    return Error{fmt::format("option {}: '{}' is not an integer", name, value), option_hint(option)};
  if (type.starts_with("FLOAT") && !is_number(value))
    return Error{fmt::format("option {}: '{}' is not a number", name, value), option_hint(option)};
  if (message.starts_with("Could not convert"))
    return Error{fmt::format("option {}: cannot read '{}'", name, value), option_hint(option)};
  // CLI11's range and set checks say "value 0 not in range 1 to 8", "maybe not in {auto,on,off}".
  std::string detail = detail_after_name(message, name);
  for (const std::string& lead : {"value " + value + " not in ", value + " not in "})
    if (detail.starts_with(lead)) {
      detail = fmt::format("'{}' is not in {}", value, detail.substr(lead.size()));
      break;
    }
  return Error{fmt::format("option {}: {}", name, detail), option_hint(option)};
}

// Words CLI11 could not place: an unknown option (preferred, being the likelier cause) or a stray argument.
std::optional<Error> unplaced_argument(const CLI::App& app, const std::vector<const CLI::App*>& chain) {
  std::vector<std::string> left;
  for (const CLI::App* command : chain)
    if (!command->get_prefix_command())
      for (const std::string& word : command->remaining()) left.push_back(word);
  if (left.empty()) return std::nullopt;
  const std::string path = command_path(chain);
  const auto unknown_option =
      std::find_if(left.begin(), left.end(), [](const std::string& w) { return w.size() >= 2 && w.front() == '-'; });
  if (unknown_option != left.end()) {
    const std::string name = unknown_option->substr(0, unknown_option->find('='));
    std::string hint = did_you_mean(name, option_names(chain));
    if (chain.size() == 1) {
      if (hint.empty()) hint = "a command's options follow it (`loom plan --tp 2`): `loom COMMAND --help` lists them";
      return Error{fmt::format("unknown option '{}'", name), hint};
    }
    if (hint.empty()) hint = fmt::format("`{} --help` lists its options", path);
    return Error{fmt::format("unknown option '{}' for `{}`", name, path), hint};
  }
  if (chain.size() == 1) {
    const std::vector<std::string> commands = command_names(app);
    std::string hint = did_you_mean(left.front(), commands);
    if (hint.empty()) hint = fmt::format("the commands are {}; `loom --help` describes them", join(commands, ", "));
    return Error{fmt::format("unknown command '{}'", left.front()), hint};
  }
  return Error{fmt::format("unexpected argument '{}' for `{}`", left.front(), path),
               fmt::format("`{}` takes no positional arguments: its options start with -- (`{} --help`)", path, path)};
}

}  // namespace

Error usage_error(const CLI::App& app, const CLI::ParseError& error) {
  const std::vector<const CLI::App*> chain = selected_chain(app);
  if (std::optional<Error> unplaced = unplaced_argument(app, chain)) return *unplaced;
  const std::string message = error.what();
  const std::string path = command_path(chain);
  const std::string kind = error.get_name();
  if (kind == "RequiredError" && chain.size() == 1) {
    return Error{"a command is required",
                 fmt::format("`loom COMMAND --help` describes one of {}", join(command_names(app), ", "))};
  }
  const std::vector<const CLI::Option*> named = options_in_message(chain, message);
  if (kind == "ExcludesError" && named.size() == 2)
    return Error{fmt::format("options {} and {} go one at a time", named[1]->get_name(), named[0]->get_name()),
                 "give one of them"};
  const CLI::Option* option = named.empty() ? nullptr : named.front();
  if (option == nullptr) return Error{lower_first(message), fmt::format("`{} --help` lists its options", path)};
  if (kind == "ArgumentMismatch" && option->results().empty())
    return Error{fmt::format("option {} needs a value", option->get_name()), option_hint(*option)};
  if (kind == "ArgumentMismatch" && option->get_expected_max() == 1 && option->results().size() > 1) {
    std::vector<std::string> values;
    for (const std::string& value : option->results()) values.push_back(fmt::format("'{}'", value));
    return Error{fmt::format("option {} is given {} values ({}), but takes one", option->get_name(), values.size(),
                             join(values, ", ")),
                 option_hint(*option)};
  }
  if (kind == "RequiredError")
    return Error{fmt::format("option {} is required", option->get_name()), option_hint(*option)};
  if (kind == "ValidationError" || kind == "ConversionError") return bad_value(*option, message);
  return Error{fmt::format("option {}: {}", option->get_name(), detail_after_name(message, option->get_name())),
               option_hint(*option)};
}

}  // namespace loom::cli
