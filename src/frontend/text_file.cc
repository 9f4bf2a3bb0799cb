#include "loom/frontend/text_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace loom::frontend {

Expected<std::string> read_text_file(const std::string& path, std::string_view what, std::string_view hint) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return fail(fmt::format("{}: is a directory, not a {}", path, what));
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(fmt::format("{}: cannot open the {} ({})", path, what, std::strerror(errno)), std::string(hint));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return fail(fmt::format("{}: error while reading the {}", path, what));
  return std::move(text).str();
}

}  // namespace loom::frontend
