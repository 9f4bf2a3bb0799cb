#include "loom/search/progress_line.h"

#include <fmt/format.h>
#include <unistd.h>

namespace loom::search {

ProgressLine::ProgressLine(std::FILE* out, bool in_place, std::chrono::milliseconds interval, Clock clock)
    : out_(out), in_place_(in_place), interval_(interval), clock_(std::move(clock)), start_(clock_()) {}

ProgressLine ProgressLine::for_stderr(bool enabled) {
  return ProgressLine(enabled ? stderr : nullptr, enabled && isatty(fileno(stderr)) != 0);
}

std::string ProgressLine::format(const Progress& progress, double elapsed_seconds) {
  std::string text = progress.phase;
  if (progress.total > 0)
    text += fmt::format(" {}/{}", progress.done, progress.total);
  else if (progress.done > 0)
    text += fmt::format(" {}", progress.done);
  if (!progress.best.empty()) text += fmt::format(" | best {}", progress.best);
  return text + fmt::format(" | {:.1f} s", elapsed_seconds);
}

void ProgressLine::update(const Progress& progress) {
  last_ = progress;
  const auto now = clock_();
  if (printed_ && now - last_print_ < interval_) return;
  last_print_ = now;
  print();
}

void ProgressLine::finish() {
  if (out_ == nullptr || !printed_) return;
  print();
  if (in_place_) std::fputc('\n', out_);
  std::fflush(out_);
  line_open_ = false;
  printed_ = false;
}

double ProgressLine::elapsed_seconds() const { return std::chrono::duration<double>(clock_() - start_).count(); }

void ProgressLine::print() {
  printed_ = true;
  if (out_ == nullptr) return;
  const std::string text = format(last_, elapsed_seconds());
  if (in_place_) {
    // Pads over a longer previous line; the newline comes with finish().
    const std::size_t pad = last_width_ > text.size() ? last_width_ - text.size() : 0;
    std::fprintf(out_, "\r%s%*s", text.c_str(), static_cast<int>(pad), "");
    last_width_ = text.size();
    line_open_ = true;
  } else {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
}

}  // namespace loom::search
