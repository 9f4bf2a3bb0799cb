// The HTML report in a real browser: headless Chromium (Debian's `chromium`, which `make setup`
// installs) opens the report of a shrunk Megatron plan, runs its script and takes a screenshot. Checks:
// the script finished (data-rendered="ok" in the dumped DOM), the timeline SVG holds event rectangles,
// and the screenshot is not blank: the timeline's band of the picture holds many colours, among them
// the timeline's event colours (tests/sim/png_stats.py decodes the PNG). Each Chromium run has a
// timeout, so a hang fails the test instead of blocking ctest. Without Chromium the test is skipped,
// except under CI (CI set), where that is a failure.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "loom/core/atomic_file.h"
#include "loom/sim/html_report.h"
#include "sim_support.h"

namespace loom::sim {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string quote(const fs::path& path) { return "'" + path.string() + "'"; }

std::size_t count(const std::string& text, std::string_view part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// A fresh directory for this run's files; LOOM_REPORT_SCREENSHOT_DIR names one to keep them.
fs::path work_directory() {
  if (const char* keep = std::getenv("LOOM_REPORT_SCREENSHOT_DIR"); keep != nullptr && *keep != '\0') {
    fs::create_directories(keep);
    return keep;
  }
  std::string pattern = (fs::temp_directory_path() / "loom-report-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) return {};
  return pattern;
}

TEST(ReportScreenshot, ChromiumRendersTheTimeline) {
  if (run("command -v chromium > /dev/null 2>&1") != 0) {
    if (std::getenv("CI") != nullptr) FAIL() << "chromium is not installed (make setup installs it)";
    GTEST_SKIP() << "chromium is not installed (make setup installs it)";
  }
  const fs::path dir = work_directory();
  ASSERT_FALSE(dir.empty()) << "cannot make a temporary directory";

  const auto p = testing::classed_plan("megatron", {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2}, "gpt3-125m",
                                       ir::DType::bf16);
  const auto model = testing::priced(p->exec);
  auto sim = simulate(p->exec, model->durations);
  ASSERT_TRUE(sim) << sim.error().to_string();
  const cost::MemoryReport memory = cost::memory_usage(p->exec);
  auto metrics = step_metrics(p->exec, *sim, memory, model->cluster.gpu, ops::builtin_ops(),
                              {.samples_per_step = 4, .tokens_per_step = 32});
  ASSERT_TRUE(metrics) << metrics.error().to_string();
  const std::string html = html_report({"gpt3-125m (shrunk)", "dgx-a100", "megatron dp=2 tp=2 pp=2, 2 micro-batches"},
                                       p->exec, *sim, *metrics, memory);
  const fs::path page = dir / "report.html", shot = dir / "report.png", dom = dir / "dom.html", log = dir / "chromium.log";
  ASSERT_TRUE(write_file_atomically(page.string(), html, "the report"));

  // HOME: Chromium writes its profile there, and CI's may not be writable.
  const std::string chromium = "HOME=" + quote(dir) + " timeout 120 chromium --headless --no-sandbox --disable-gpu " +
                               "--hide-scrollbars --no-first-run --disable-dev-shm-usage --window-size=1400,1000 ";
  ASSERT_EQ(run(chromium + "--screenshot=" + quote(shot) + " " + quote("file://" + page.string()) + " > " + quote(log) +
                " 2>&1"),
            0)
      << read(log);
  ASSERT_EQ(run(chromium + "--dump-dom " + quote("file://" + page.string()) + " > " + quote(dom) + " 2>> " + quote(log)), 0)
      << read(log);

  const std::string rendered = read(dom);
  EXPECT_NE(rendered.find("data-rendered=\"ok\""), std::string::npos)
      << "the page's script did not finish: " << rendered.substr(rendered.find("<body"), 200);
  const std::size_t timeline = rendered.find("<svg id=\"timeline\"");
  ASSERT_NE(timeline, std::string::npos);
  const std::string timeline_svg = rendered.substr(timeline, rendered.find("</svg>", timeline) - timeline);
  EXPECT_GT(count(timeline_svg, "class=\"ev\""), 100u);
  EXPECT_GT(count(rendered, "class=\"bar\""), 8u);  // memory and breakdown bars

  // The timeline sits in the band below the summary table: it must hold the forward, backward and
  // collective colours, and the band many colours (text, axes, events).
  const fs::path stats = dir / "stats.json";
  ASSERT_EQ(run("python3 " + quote(fs::path(LOOM_SOURCE_DIR) / "tests/sim/png_stats.py") + " " + quote(shot) +
                " --rows 430 1000 --color 4e79a7 --color 59a14f --color f28e2b > " + quote(stats) + " 2>&1"),
            0)
      << read(stats);
  const auto pixels = nlohmann::json::parse(read(stats), nullptr, false);
  ASSERT_FALSE(pixels.is_discarded()) << read(stats);
  EXPECT_EQ(pixels["width"], 1400);
  EXPECT_EQ(pixels["height"], 1000);
  EXPECT_GT(pixels["distinct_colors"].get<int>(), 50);
  EXPECT_GT(pixels["non_white_fraction"].get<double>(), 0.05);
  for (const char* color : {"4e79a7", "59a14f", "f28e2b"}) EXPECT_GT(pixels["color_counts"][color].get<int>(), 50) << color;
  if (std::getenv("LOOM_REPORT_SCREENSHOT_DIR") == nullptr && !HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace loom::sim
