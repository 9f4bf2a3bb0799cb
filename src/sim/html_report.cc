#include "loom/sim/html_report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <span>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "loom/sim/device_groups.h"
#include "loom/sim/memory_over_time.h"
#include "loom/sim/summary_table.h"
#include "loom/sim/timeline_sample.h"

namespace loom::sim {
namespace {

using nlohmann::json;

// Times in the page: microseconds rounded to the nanosecond, so the numbers (and the file) are stable.
double micros(double seconds) { return std::round(seconds * 1e9) / 1e3; }

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// The event kinds the timeline colours; computes by the pass of their op.
constexpr std::array<std::string_view, 7> kKinds = {"forward", "backward", "optimizer", "local", "collective", "send", "recv"};

constexpr int kLocal = 3;

int kind_of(const exec::ExecPlan& exec, const Event& e) {
  switch (e.kind) {
    case EventKind::local: return kLocal;
    case EventKind::collective: return 4;
    case EventKind::send: return 5;
    case EventKind::copy: return 5;  // a transfer too (GPU <-> host), coloured as a send
    case EventKind::recv: return 6;
    case EventKind::compute: break;
  }
  const auto d = static_cast<std::size_t>(e.device);
  if (exec.plan == nullptr || d >= exec.programs.size() || e.instruction < 0 ||
      static_cast<std::size_t>(e.instruction) >= exec.programs[d].size())
    return 0;
  const auto* c = std::get_if<exec::Compute>(&exec.programs[d][static_cast<std::size_t>(e.instruction)]);
  if (c == nullptr || c->sub_op.index() >= exec.plan->sub_ops.size()) return 0;
  return static_cast<int>(exec.plan->op_of(c->sub_op).pass);  // forward, backward, optimizer: 0, 1, 2
}

std::string lane_label(const DeviceGroup& group) {
  if (group.devices.size() == 1) return fmt::format("device {}", group.representative);
  return fmt::format("devices {} ({})", device_ranges(group.devices, 2), group.devices.size());
}

struct Timeline {
  json lanes = json::array();
  json events = json::array();
  std::vector<std::string> notes;
};

// Each lane's budget split between its rows: a row needing less than half leaves the rest to the other.
std::array<std::size_t, 2> row_budgets(std::size_t budget, const std::array<std::size_t, 2>& events) {
  const std::size_t compute = std::min(events[0], std::max(budget / 2, budget - std::min(budget, events[1])));
  return {std::max<std::size_t>(compute, 1), std::max<std::size_t>(budget - compute, 1)};
}

// A box of several events: coloured by the kind that fills most of it (their one kind, unless the budget
// forced kinds together), named by its first and last.
json box_event(const exec::ExecPlan& exec, const SimResult& sim, std::span<const std::size_t> row, const TimelineBox& box,
               int lane, int row_index) {
  const Event& first = sim.events[row[box.first]];
  if (box.count() == 1)
    return {lane, row_index, micros(first.start), micros(first.end - first.start), kind_of(exec, first), first.name};
  std::array<double, kKinds.size()> busy{};
  for (std::size_t k = box.first; k < box.last; ++k) {
    const Event& e = sim.events[row[k]];
    busy[static_cast<std::size_t>(kind_of(exec, e))] += e.end - e.start;
  }
  // Locals (gradient sums, scales) sit between the ops of a pass: they colour a box only when alone.
  if (std::ranges::any_of(busy, [&](double t) { return t > 0 && &t != &busy[kLocal]; })) busy[kLocal] = 0;
  const auto kind = static_cast<int>(std::ranges::max_element(busy) - busy.begin());
  const Event& last = sim.events[row[box.last - 1]];
  return {lane, row_index, micros(box.start), micros(box.end - box.start), kind,
          fmt::format("{} events: {} ... {}", box.count(), first.name, last.name)};
}

Timeline timeline(const exec::ExecPlan& exec, const SimResult& sim, const std::vector<DeviceGroup>& groups,
                  const HtmlOptions& options) {
  Timeline t;
  std::vector<int> lane_of(sim.devices.size(), -1);
  const std::size_t lanes = std::min(groups.size(), options.max_lanes);
  for (std::size_t g = 0; g < lanes; ++g) {
    lane_of[static_cast<std::size_t>(groups[g].representative)] = static_cast<int>(g);
    t.lanes.push_back({{"device", groups[g].representative}, {"label", lane_label(groups[g])}});
  }
  if (lanes < groups.size())
    t.notes.push_back(fmt::format("The timeline shows the first {} of {} lanes (groups of devices sharing their times).",
                                  lanes, groups.size()));
  // Per lane, its compute row and its communication row (every other stream), events by start.
  std::vector<std::array<std::vector<std::size_t>, 2>> rows(lanes);
  for (std::size_t i = 0; i < sim.events.size(); ++i) {
    const auto d = static_cast<std::size_t>(sim.events[i].device);
    if (d < lane_of.size() && lane_of[d] >= 0)
      rows[static_cast<std::size_t>(lane_of[d])][sim.events[i].stream == Stream::compute ? 0 : 1].push_back(i);
  }
  std::size_t total = 0;
  for (auto& lane : rows)
    for (auto& row : lane) {
      std::ranges::stable_sort(row, {}, [&](std::size_t i) { return sim.events[i].start; });
      total += row.size();
    }
  const std::size_t lane_budget = std::max<std::size_t>(options.max_events / std::max<std::size_t>(lanes, 1), 2);
  for (std::size_t lane = 0; lane < lanes; ++lane) {
    const std::array<std::size_t, 2> budgets = row_budgets(lane_budget, {rows[lane][0].size(), rows[lane][1].size()});
    for (int r = 0; r < 2; ++r) {
      const std::vector<std::size_t>& row = rows[lane][static_cast<std::size_t>(r)];
      std::vector<Span> spans;
      spans.reserve(row.size());
      for (std::size_t i : row) {
        const int kind = kind_of(exec, sim.events[i]);
        spans.push_back({sim.events[i].start, sim.events[i].end, kind == kLocal ? -1 : kind});
      }
      for (const TimelineBox& box : sample_row(spans, sim.step_time, budgets[static_cast<std::size_t>(r)]))
        t.events.push_back(box_event(exec, sim, row, box, static_cast<int>(lane), r));
    }
  }
  if (t.events.size() < total)
    t.notes.push_back(fmt::format(
        "The timeline draws {} boxes for its {} events (at most {} per lane): in each row, events shorter than a "
        "window of the step are merged into one box per window and kind (\"k events\"), so every part of the step "
        "shows.",
        t.events.size(), total, lane_budget));
  return t;
}

// The devices the bar charts show, with their labels: every device; else one per group (a group's
// devices have equal programs, so equal memory, or are one device); else the first ones and the device
// with the largest peak.
struct Bars {
  std::vector<int> devices;
  std::vector<std::string> labels;
  std::string note;
};

Bars bars(const std::vector<DeviceGroup>& groups, std::size_t devices, int max_device, std::size_t max_bars) {
  Bars b;
  if (devices <= max_bars) {
    for (std::size_t d = 0; d < devices; ++d) {
      b.devices.push_back(static_cast<int>(d));
      b.labels.push_back(fmt::format("{}", d));
    }
  } else if (groups.size() <= max_bars) {
    for (const DeviceGroup& g : groups) {
      b.devices.push_back(g.representative);
      b.labels.push_back(device_ranges(g.devices, 1));
    }
    b.note = fmt::format("One bar per group of devices sharing their times ({} groups of {} devices).", groups.size(), devices);
  } else {
    for (std::size_t d = 0; d + 1 < max_bars; ++d) b.devices.push_back(static_cast<int>(d));
    if (max_device >= static_cast<int>(max_bars) - 1) b.devices.push_back(max_device);
    for (int d : b.devices) b.labels.push_back(fmt::format("{}", d));
    b.note = fmt::format("Showing devices 0-{} of {} and the device with the largest peak.", max_bars - 2, devices);
  }
  return b;
}

std::string summary_rows(const ReportLabels& labels, const SimResult& sim, const StepMetrics& m) {
  std::vector<std::pair<std::string, std::string>> rows = {
      {"Model", labels.model},
      {"Cluster", labels.cluster},
      {"Policy", labels.policy},
      {"Devices", fmt::format("{}", m.devices)},
      {"Step time", format_seconds(m.step_time)},
      {"Throughput", m.tokens_per_second > 0
                         ? fmt::format("{:.2f} samples/s, {:.0f} tokens/s", m.samples_per_second, m.tokens_per_second)
                         : fmt::format("{:.2f} samples/s", m.samples_per_second)},
      {"MFU", fmt::format("{:.1f} %", 100 * m.mfu)},
      {"Model FLOPs per step", fmt::format("{:.4g} (forward and backward of the single-device graph)", m.model_flops)},
      {"Peak FLOP/s per GPU", fmt::format("{:.4g} ({})", m.peak_flops, cluster::name(m.precision))},
  };
  if (m.max_memory_device >= 0) {
    const DeviceMetrics& top = m.per_device[static_cast<std::size_t>(m.max_memory_device)];
    rows.emplace_back("Peak memory", fmt::format("{} on device {} of {} per GPU ({})",
                                                 cost::format_bytes(static_cast<double>(top.peak_bytes)), top.device,
                                                 cost::format_bytes(static_cast<double>(m.memory_capacity)),
                                                 top.at_peak.to_string()));
  }
  rows.emplace_back("Out of memory", m.out_of_memory() ? fmt::format("YES: {} of {} devices", m.out_of_memory_devices, m.devices)
                                                       : std::string("no"));
  rows.emplace_back("Idle (bubble)", fmt::format("{:.1f} % of device time", 100 * sim.idle_fraction()));
  std::string simulated = fmt::format("{} of {} devices", sim.simulated_devices.size(), m.devices);
  if (sim.symmetric()) simulated += ", one per device class";
  if (!sim.symmetry_fallback.empty()) simulated += " (the device classes are not a symmetry of the timing: see the timeline)";
  rows.emplace_back("Simulated", simulated);
  std::string html;
  for (const auto& [key, value] : rows) {
    const bool alert = key == "Out of memory" && m.out_of_memory();
    html += fmt::format("<tr><th>{}</th><td{}>{}</td></tr>\n", escape(key), alert ? " class=\"alert\"" : "", escape(value));
  }
  return html;
}

std::string notes_html(const std::vector<std::string>& notes) {
  std::string html;
  for (const std::string& n : notes) html += "<p class=\"note\">" + escape(n) + "</p>\n";
  return html;
}

constexpr std::string_view kStyle = R"CSS(
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 14px; margin: 16px 0 6px; }
.sub { color: #555; margin: 0 0 12px; }
table.summary { border-collapse: collapse; }
table.summary th { text-align: left; font-weight: 600; padding: 3px 16px 3px 0; vertical-align: top; white-space: nowrap; }
table.summary td { padding: 3px 0; }
td.alert { color: #b00020; font-weight: 600; }
.note { color: #666; font-size: 12px; margin: 4px 0; }
.legend span { display: inline-block; margin-right: 14px; font-size: 12px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; vertical-align: -1px; }
.scroll { overflow-x: auto; border: 1px solid #eee; }
svg text { font-size: 11px; fill: #333; }
svg .axis { stroke: #ccc; stroke-width: 1; }
svg .cap { stroke: #b00020; stroke-dasharray: 5 3; stroke-width: 1.5; }
.controls { margin: 6px 0; }
)CSS";

constexpr std::string_view kScript = R"JS(
(function () {
  try {
    var data = JSON.parse(document.getElementById('loom-data').textContent);
    var NS = 'http://www.w3.org/2000/svg';
    var KIND_COLORS = ['#4e79a7', '#59a14f', '#b07aa1', '#9c9c9c', '#f28e2b', '#e15759', '#ff9da7'];
    var ROLE_COLORS = ['#edc948', '#4e79a7', '#f28e2b', '#59a14f', '#b07aa1', '#76b7b2'];
    var PART_COLORS = ['#4e79a7', '#f28e2b', '#d3d3d3'];
    var el = function (name, attrs, parent) {
      var e = document.createElementNS(NS, name);
      for (var k in attrs) e.setAttribute(k, attrs[k]);
      if (parent) parent.appendChild(e);
      return e;
    };
    var text = function (parent, x, y, s, anchor) {
      var t = el('text', {x: x, y: y, 'text-anchor': anchor || 'start'}, parent);
      t.textContent = s;
      return t;
    };
    var tip = function (e, s) { el('title', {}, e).textContent = s; };
    var clear = function (node) { while (node.firstChild) node.removeChild(node.firstChild); };
    var fmtTime = function (us) {
      if (us >= 1e6) return (us / 1e6).toFixed(3) + ' s';
      if (us >= 1e3) return (us / 1e3).toFixed(2) + ' ms';
      return us.toFixed(1) + ' us';
    };
    var fmtBytes = function (b) {
      var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
      while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
      return (i ? b.toFixed(2) : b.toFixed(0)) + ' ' + units[i];
    };
    var niceStep = function (range, n, base) {
      if (!(range > 0)) return 1;
      base = base || 10;
      var raw = range / n, p = Math.pow(base, Math.floor(Math.log(raw) / Math.log(base))), m = raw / p;
      return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
    };
    var legend = function (id, names, colors) {
      var box = document.getElementById(id);
      clear(box);
      names.forEach(function (n, i) {
        var s = document.createElement('span'), sw = document.createElement('i');
        sw.style.background = colors[i % colors.length];
        s.appendChild(sw);
        s.appendChild(document.createTextNode(n));
        box.appendChild(s);
      });
    };
    var size = function (svg, w, h) {
      svg.setAttribute('width', w);
      svg.setAttribute('height', h);
      svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
    };
    var baseWidth = function (svg) { return Math.max(640, (svg.parentNode.clientWidth || 1200) - 4); };

    function drawTimeline(zoom) {
      var svg = document.getElementById('timeline');
      clear(svg);
      var left = 170, right = 24, top = 30, rowH = 16, laneH = 2 * rowH + 12;
      var width = baseWidth(svg) * zoom, plotW = width - left - right;
      var height = top + data.lanes.length * laneH + 8;
      size(svg, width, height);
      var step = data.step_us > 0 ? data.step_us : 1;
      var x = function (us) { return left + us / step * plotW; };
      var tick = niceStep(step, Math.max(4, Math.round(8 * zoom)));
      for (var t = 0; t <= step * (1 + 1e-9); t += tick) {
        el('line', {x1: x(t), x2: x(t), y1: top - 6, y2: height, 'class': 'axis'}, svg);
        text(svg, x(t), top - 10, fmtTime(t), 'middle');
      }
      data.lanes.forEach(function (lane, i) {
        var y = top + i * laneH;
        el('rect', {x: left, y: y, width: plotW, height: 2 * rowH, fill: '#f7f7f7'}, svg);
        text(svg, 4, y + rowH - 3, lane.label);
        text(svg, left - 6, y + rowH - 4, 'compute', 'end').setAttribute('fill', '#888');
        text(svg, left - 6, y + 2 * rowH - 4, 'comm', 'end').setAttribute('fill', '#888');
      });
      var g = el('g', {}, svg);
      data.events.forEach(function (e) {
        var r = el('rect', {'class': 'ev', x: x(e[2]).toFixed(2), y: top + e[0] * laneH + e[1] * rowH + 1,
                            width: Math.max(0.6, e[3] / step * plotW).toFixed(2), height: rowH - 2,
                            fill: KIND_COLORS[e[4]]}, g);
        tip(r, e[5] + ' (' + data.kinds[e[4]] + '): ' + fmtTime(e[2]) + ' + ' + fmtTime(e[3]));
      });
    }

    // Vertical stacked bars: values[i] is a list of parts; returns nothing.
    function stackedBars(svg, labels, values, colors, yMax, yLabel, cap, tips) {
      clear(svg);
      var left = 80, right = 20, top = 16, plotH = 220, bottom = 46;
      var width = baseWidth(svg), plotW = width - left - right, height = top + plotH + bottom;
      size(svg, width, height);
      var y = function (v) { return top + plotH - v / yMax * plotH; };
      var tick = niceStep(yMax, 5, yLabel === 'bytes' ? 2 : 10);
      for (var v = 0; v <= yMax * (1 + 1e-9); v += tick) {
        el('line', {x1: left, x2: left + plotW, y1: y(v), y2: y(v), 'class': 'axis'}, svg);
        text(svg, left - 6, y(v) + 4, yLabel === 'bytes' ? fmtBytes(v) : Math.round(v * 100) + ' %', 'end');
      }
      var slot = plotW / Math.max(1, values.length), w = Math.max(1, slot * 0.8);
      var every = Math.max(1, Math.ceil(values.length / 40));
      values.forEach(function (parts, i) {
        var base = 0, bx = left + i * slot + (slot - w) / 2;
        parts.forEach(function (p, k) {
          if (p <= 0) return;
          var r = el('rect', {'class': 'bar', x: bx.toFixed(2), y: y(base + p).toFixed(2), width: w.toFixed(2),
                              height: (y(base) - y(base + p)).toFixed(2), fill: colors[k % colors.length]}, svg);
          tip(r, tips(i, k, p));
          base += p;
        });
        if (i % every === 0) text(svg, bx + w / 2, top + plotH + 14, labels[i], 'middle');
      });
      if (cap !== null && cap <= yMax) {
        el('line', {x1: left, x2: left + plotW, y1: y(cap), y2: y(cap), 'class': 'cap'}, svg);
        text(svg, left + plotW, y(cap) - 4, 'capacity ' + fmtBytes(cap), 'end').setAttribute('fill', '#b00020');
      } else if (cap !== null && cap > 0) {
        text(svg, left + plotW, top + 10, 'capacity ' + fmtBytes(cap) + ', above the chart', 'end').setAttribute('fill', '#b00020');
      }
    }

    function drawMemory() {
      var m = data.memory;
      legend('role-legend', m.roles, ROLE_COLORS);
      var peak = 0;
      m.bars.forEach(function (b) { peak = Math.max(peak, b.roles.reduce(function (a, v) { return a + v; }, 0)); });
      var yMax = Math.max(1, peak * 1.1);
      if (m.capacity > 0 && m.capacity <= peak * 1.6) yMax = Math.max(yMax, m.capacity * 1.05);
      stackedBars(document.getElementById('memory-bars'), m.bars.map(function (b) { return b.label; }),
                  m.bars.map(function (b) { return b.roles; }), ROLE_COLORS, yMax, 'bytes', m.capacity,
                  function (i, k, v) { return 'device ' + m.bars[i].label + ': ' + m.roles[k] + ' ' + fmtBytes(v); });

      var svg = document.getElementById('memory-curve');
      clear(svg);
      var c = data.curve, left = 80, right = 20, top = 16, plotH = 200, bottom = 30;
      var width = baseWidth(svg), plotW = width - left - right;
      size(svg, width, top + plotH + bottom);
      var tMax = data.step_us > 0 ? data.step_us : 1, bMax = 1;
      c.points.forEach(function (p) { bMax = Math.max(bMax, p[1]); });
      bMax *= 1.1;
      if (m.capacity > 0 && m.capacity <= bMax * 1.5) bMax = Math.max(bMax, m.capacity * 1.05);
      var x = function (us) { return left + us / tMax * plotW; };
      var y = function (b) { return top + plotH - b / bMax * plotH; };
      var tick = niceStep(bMax, 5, 2);
      for (var v = 0; v <= bMax; v += tick) {
        el('line', {x1: left, x2: left + plotW, y1: y(v), y2: y(v), 'class': 'axis'}, svg);
        text(svg, left - 6, y(v) + 4, fmtBytes(v), 'end');
      }
      var tt = niceStep(tMax, 8);
      for (var t = 0; t <= tMax * (1 + 1e-9); t += tt) text(svg, x(t), top + plotH + 16, fmtTime(t), 'middle');
      var d = '';
      c.points.forEach(function (p, i) {
        d += (i === 0 ? 'M' + x(p[0]).toFixed(2) + ' ' + y(p[1]).toFixed(2)
                      : 'H' + x(p[0]).toFixed(2) + 'V' + y(p[1]).toFixed(2));
      });
      if (c.points.length) d += 'H' + x(tMax).toFixed(2);
      el('path', {'class': 'curve', d: d, fill: 'none', stroke: '#4e79a7', 'stroke-width': 1.5}, svg);
      if (m.capacity > 0 && m.capacity <= bMax) {
        el('line', {x1: left, x2: left + plotW, y1: y(m.capacity), y2: y(m.capacity), 'class': 'cap'}, svg);
      } else if (m.capacity > 0) {
        text(svg, left + plotW, top + 10, 'capacity ' + fmtBytes(m.capacity) + ', above the chart', 'end')
            .setAttribute('fill', '#b00020');
      }
    }

    function drawBreakdown() {
      legend('part-legend', ['compute', 'exposed communication', 'idle'], PART_COLORS);
      var b = data.breakdown, step = data.step_us > 0 ? data.step_us : 1;
      stackedBars(document.getElementById('breakdown'), b.map(function (r) { return r[0]; }),
                  b.map(function (r) { return [r[1] / step, r[2] / step, r[3] / step]; }), PART_COLORS, 1, 'share', null,
                  function (i, k, v) {
                    return 'device ' + b[i][0] + ': ' + ['compute', 'exposed communication', 'idle'][k] + ' ' +
                           fmtTime(v * step) + ' (' + (v * 100).toFixed(1) + ' %)';
                  });
    }

    legend('kind-legend', data.kinds, KIND_COLORS);
    drawTimeline(1);
    drawMemory();
    drawBreakdown();
    document.getElementById('zoom').addEventListener('change', function (ev) {
      try {
        drawTimeline(Number(ev.target.value));
      } catch (e) {
        document.body.dataset.rendered = 'error: ' + (e && e.message ? e.message : String(e));
      }
    });
    document.body.dataset.rendered = 'ok';
  } catch (e) {
    document.body.dataset.rendered = 'error: ' + (e && e.message ? e.message : String(e));
  }
})();
)JS";

}  // namespace

std::string html_report(const ReportLabels& labels, const exec::ExecPlan& exec, const SimResult& sim,
                        const StepMetrics& metrics, const cost::MemoryReport& memory, HtmlOptions options) {
  const std::vector<DeviceGroup> groups = device_groups(sim);
  Timeline t = timeline(exec, sim, groups, options);

  const Bars b = bars(groups, metrics.per_device.size(), metrics.max_memory_device, std::max<std::size_t>(options.max_bars, 2));
  json roles = json::array();
  for (std::size_t r = 0; r < cost::kRoleCount; ++r) roles.push_back(std::string(ir::name(static_cast<ir::TensorRole>(r))));
  json memory_bars = json::array(), breakdown = json::array();
  for (std::size_t i = 0; i < b.devices.size(); ++i) {
    const DeviceMetrics& d = metrics.per_device[static_cast<std::size_t>(b.devices[i])];
    memory_bars.push_back({{"label", b.labels[i]}, {"device", d.device}, {"roles", d.at_peak.bytes}});
    breakdown.push_back({b.labels[i], micros(d.compute), micros(d.exposed_communication), micros(d.idle)});
  }
  json curve = {{"device", metrics.max_memory_device}, {"points", json::array()}};
  if (metrics.max_memory_device >= 0 && memory.devices.size() == metrics.per_device.size())
    for (const MemoryPoint& p : downsample(memory_over_time(exec, sim, metrics.max_memory_device), options.max_memory_points))
      curve["points"].push_back({micros(p.time), p.bytes});

  json kinds = json::array();
  for (std::string_view k : kKinds) kinds.push_back(std::string(k));
  const json data = {{"step_us", micros(sim.step_time)},
                     {"kinds", std::move(kinds)},
                     {"lanes", std::move(t.lanes)},
                     {"events", std::move(t.events)},
                     {"memory", {{"capacity", metrics.memory_capacity}, {"roles", std::move(roles)}, {"bars", std::move(memory_bars)}}},
                     {"curve", std::move(curve)},
                     {"breakdown", std::move(breakdown)}};
  std::string data_text = data.dump(-1, ' ', true);  // ASCII only
  // Inside <script>, "</" could close the element: JSON allows "<\/" for it.
  for (std::size_t at = data_text.find("</"); at != std::string::npos; at = data_text.find("</", at + 3))
    data_text.replace(at, 2, "<\\/");

  if (!sim.symmetry_fallback.empty())
    t.notes.push_back("Every device was simulated, as the device classes are not a symmetry of the timing: " +
                      sim.symmetry_fallback);
  std::vector<std::string> bar_notes;
  if (!b.note.empty()) bar_notes.push_back(b.note);
  const std::string title = fmt::format("{} on {}", labels.model, labels.cluster);
  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += fmt::format("<title>Loom report: {}</title>\n<style>{}</style>\n</head>\n<body>\n", escape(title), kStyle);
  html += fmt::format("<h1>Loom plan report</h1>\n<p class=\"sub\">{}, policy {}</p>\n", escape(title), escape(labels.policy));
  html += "<h2>Summary</h2>\n<table class=\"summary\">\n" + summary_rows(labels, sim, metrics) + "</table>\n";
  html += "<h2>Timeline</h2>\n<div class=\"controls\"><span class=\"legend\" id=\"kind-legend\"></span>\n";
  html += "<label>zoom <select id=\"zoom\"><option>1</option><option>2</option><option>4</option><option>8</option>"
          "<option>16</option><option>32</option></select></label></div>\n";
  html += "<div class=\"scroll\"><svg id=\"timeline\" role=\"img\" aria-label=\"timeline\"></svg></div>\n" + notes_html(t.notes);
  html += "<h2>Memory</h2>\n<h3>Peak per device, by tensor role</h3>\n<div class=\"legend\" id=\"role-legend\"></div>\n";
  html += "<svg id=\"memory-bars\" role=\"img\" aria-label=\"peak memory per device\"></svg>\n" + notes_html(bar_notes);
  html += fmt::format("<h3>Over the step: device {} (the largest peak)</h3>\n", metrics.max_memory_device);
  html += "<svg id=\"memory-curve\" role=\"img\" aria-label=\"memory over time\"></svg>\n";
  html += "<h2>Time per device</h2>\n<div class=\"legend\" id=\"part-legend\"></div>\n";
  html += "<svg id=\"breakdown\" role=\"img\" aria-label=\"time per device\"></svg>\n" + notes_html(bar_notes);
  html += "<script type=\"application/json\" id=\"loom-data\">" + data_text + "</script>\n";
  html += fmt::format("<script>{}</script>\n</body>\n</html>\n", kScript);
  return html;
}

std::string html_report(const ReportLabels& labels, const exec::FoldedStep& folded, const SimResult& sim,
                        const StepMetrics& metrics, const cost::MemoryReport& memory, HtmlOptions options) {
  return html_report(labels, folded.step, sim, metrics, memory, options);
}

}  // namespace loom::sim
