//===- Plot.cpp - Line plots and bar charts as SVG ------------------------===//
#include "runtime/Plot.h"

#include "runtime/FileSystem.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

namespace attnc::plot {

namespace {

std::string escape(const std::string &s) {
  std::string out;
  for (char c : s)
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '\'':
      out += "&apos;";
      break;
    default:
      out += c;
    }
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", std::abs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

} // namespace

std::vector<double> niceTicks(double lo, double hi, int count) {
  if (!(hi > lo))
    return {lo};
  const double raw = (hi - lo) / std::max(1, count);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(t);
  return ticks;
}

std::vector<double> movingAverage(const std::vector<double> &v, int window) {
  const int half = std::max(0, window / 2);
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    double sum = 0;
    int n = 0;
    const size_t from = i >= size_t(half) ? i - half : 0, to = std::min(v.size(), i + half + 1);
    for (size_t j = from; j < to; ++j)
      if (std::isfinite(v[j]))
        sum += v[j], ++n;
    out[i] = n ? sum / n : NAN;
  }
  return out;
}

std::vector<double> logTicks(double lo, double hi, int count) {
  if (!(lo > 0) || !(hi > lo))
    return {lo};
  std::vector<double> all, decades;
  for (double p = std::pow(10.0, std::floor(std::log10(lo))); p <= hi * (1 + 1e-9); p *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (m * p >= lo * (1 - 1e-9) && m * p <= hi * (1 + 1e-9)) {
        all.push_back(m * p);
        if (m == 1.0)
          decades.push_back(p);
      }
  if (int(all.size()) > count && decades.size() >= 2)
    return decades;
  if (all.size() >= 2)
    return all;
  return {lo, hi};
}

namespace {

/// One axis: its range, its scale and where a value lands in [0, 1].
struct Axis {
  double lo = INFINITY, hi = -INFINITY;
  Scale scale = Scale::Linear;
  bool usable(double v) const { return std::isfinite(v) && (scale == Scale::Linear || v > 0); }
  void widen(double v) { lo = std::min(lo, v), hi = std::max(hi, v); }
  /// A range for no points, one point or one value.
  void settle() {
    if (!(hi >= lo))
      lo = scale == Scale::Log ? 1 : 0, hi = scale == Scale::Log ? 10 : 1;
    if (scale == Scale::Log && hi / lo < 1 + 1e-9)
      lo /= 2, hi *= 2;
    if (scale == Scale::Linear && hi - lo < 1e-12)
      hi = lo + 1;
  }
  double fraction(double v) const {
    return scale == Scale::Log ? std::log(v / lo) / std::log(hi / lo) : (v - lo) / (hi - lo);
  }
  std::vector<double> ticks(int count) const {
    return scale == Scale::Log ? logTicks(lo, hi, count) : niceTicks(lo, hi, count);
  }
};

double legendWidth(size_t longestName) { return 40 + 6.6 * double(longestName); }

/// The figure's frame: its size, a white background and the title centred
/// at titleX.
void openSvg(std::ostream &os, double width, double height, double titleX,
             const std::string &title) {
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
     << "' font-family='sans-serif' font-size='12'>\n"
     << "<rect width='100%' height='100%' fill='white'/>\n"
     << "<text x='" << titleX << "' y='22' text-anchor='middle' font-size='14'>" << escape(title)
     << "</text>\n";
}

/// A horizontal grid line from left to right at height y, labelled `value`
/// on the left.
void yGridLine(std::ostream &os, double left, double right, double y, double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", y);
  os << "<line x1='" << left << "' y1='" << buf << "' x2='" << right << "' y2='" << buf
     << "' stroke='#e4e4e4'/>\n<text x='" << left - 6 << "' y='" << y + 4 << "' text-anchor='end'>"
     << number(value) << "</text>\n";
}

/// The y axis's label, turned upright beside the axis, centred at height y.
void yAxisLabel(std::ostream &os, double y, const std::string &label) {
  os << "<text transform='translate(16," << y << ") rotate(-90)' text-anchor='middle'>"
     << escape(label) << "</text>\n";
}

} // namespace

const char *paletteColor(int index) {
  static const char *colors[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e",
                                 "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  return colors[(index % 8 + 8) % 8];
}

std::string renderLinePlot(const LinePlot &plot) {
  Axis xa, ya;
  xa.scale = plot.xScale, ya.scale = plot.yScale;
  auto drawable = [&](const Series &s, size_t i) { return xa.usable(s.x[i]) && ya.usable(s.y[i]); };
  auto points = [&](const Series &s) {
    size_t n = 0;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      n += drawable(s, i);
    return n;
  };
  for (const Series &s : plot.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (drawable(s, i))
        xa.widen(s.x[i]), ya.widen(s.y[i]);
  for (double t : plot.xTicks)
    if (xa.usable(t))
      xa.widen(t);
  if (plot.yFromZero && ya.scale == Scale::Linear)
    ya.widen(0);
  xa.settle(), ya.settle();
  // Keep curves off the frame.
  if (ya.scale == Scale::Log) {
    const double pad = std::pow(ya.hi / ya.lo, 0.04);
    ya.lo /= pad, ya.hi *= pad;
  } else {
    const double pad = (ya.hi - ya.lo) * 0.04;
    if (!(plot.yFromZero && ya.lo == 0))
      ya.lo -= pad;
    ya.hi += pad;
  }
  size_t longest = 0, entries = 0;
  for (const Series &s : plot.series)
    if (!s.name.empty() && points(s))
      longest = std::max(longest, s.name.size()), ++entries;
  const double L = 70, T = 40, B = 56, frameW = 626, lw = legendWidth(longest);
  const double R = plot.legendOutside && entries ? 24 + lw : 24, W = L + frameW + R, H = 420;
  auto px = [&](double x) { return L + xa.fraction(x) * frameW; };
  auto py = [&](double y) { return T + (1 - ya.fraction(y)) * (H - T - B); };
  std::ostringstream os;
  char buf[96];
  openSvg(os, W, H, (L + W - R) / 2, plot.title);
  // Grid and tick labels.
  for (double t : ya.ticks(6))
    yGridLine(os, L, W - R, py(t), t);
  std::vector<double> xticks;
  for (double t : plot.xTicks)
    if (xa.usable(t))
      xticks.push_back(t);
  if (xticks.empty())
    xticks = xa.ticks(8);
  for (double t : xticks) {
    std::snprintf(buf, sizeof buf, "%.1f", px(t));
    os << "<line x1='" << buf << "' y1='" << T << "' x2='" << buf << "' y2='" << H - B
       << "' stroke='#e4e4e4'/>\n<text x='" << buf << "' y='" << H - B + 16
       << "' text-anchor='middle'>" << number(t) << "</text>\n";
  }
  os << "<rect x='" << L << "' y='" << T << "' width='" << frameW << "' height='" << H - T - B
     << "' fill='none' stroke='black'/>\n"
     << "<text x='" << (L + W - R) / 2 << "' y='" << H - 14 << "' text-anchor='middle'>"
     << escape(plot.xLabel) << "</text>\n";
  yAxisLabel(os, (T + H - B) / 2, plot.yLabel);
  auto dashOf = [](const Series &s) {
    return s.dash.empty() ? std::string() : " stroke-dasharray='" + escape(s.dash) + "'";
  };
  // The curves, in order (faint ones first by the caller's choice).
  for (const Series &s : plot.series) {
    if (!points(s))
      continue;
    os << "<polyline fill='none' stroke='" << s.color << "' stroke-width='" << s.width
       << "' stroke-opacity='" << s.opacity << "'" << dashOf(s) << " points='";
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (drawable(s, i)) {
        std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px(s.x[i]), py(s.y[i]));
        os << buf;
      }
    os << "'/>\n";
    if (s.markers)
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        if (drawable(s, i))
          os << "<circle cx='" << px(s.x[i]) << "' cy='" << py(s.y[i]) << "' r='3.5' fill='"
             << s.color << "'/>\n";
  }
  // The legend, top right (inside on white so curves behind it stay
  // readable, or right of the frame).
  if (entries) {
    const double lx = plot.legendOutside ? L + frameW + 12 : W - R - 8 - lw;
    os << "<rect x='" << lx << "' y='" << T + 6 << "' width='" << lw << "' height='"
       << 16 * entries + 8 << "' fill='white' fill-opacity='0.85' stroke='#cccccc'/>\n";
    double ly = T + 22;
    for (const Series &s : plot.series) {
      if (s.name.empty() || !points(s))
        continue;
      os << "<line x1='" << lx + 6 << "' y1='" << ly - 4 << "' x2='" << lx + 30 << "' y2='"
         << ly - 4 << "' stroke='" << s.color << "' stroke-width='" << std::max(2.0, s.width)
         << "' stroke-opacity='" << s.opacity << "'" << dashOf(s) << "/>\n<text x='" << lx + 36
         << "' y='" << ly << "'>" << escape(s.name) << "</text>\n";
      ly += 16;
    }
  }
  os << "</svg>\n";
  return os.str();
}

Status writeLinePlot(const std::string &path, const LinePlot &plot) {
  return fs::writeFileAtomic(path, renderLinePlot(plot));
}

std::string renderBarChart(const BarChart &chart) {
  const double groupW = 150, L = 70, T = 40, B = 70, H = 400;
  size_t longest = 0;
  for (const BarSeries &s : chart.series)
    longest = std::max(longest, s.name.size());
  const double lw = legendWidth(longest), R = 24 + lw;
  const double frameW = groupW * double(std::max<size_t>(1, chart.categories.size()));
  const double W = L + frameW + R;
  double ymax = 0;
  for (const BarSeries &s : chart.series)
    for (double v : s.values)
      if (std::isfinite(v))
        ymax = std::max(ymax, v);
  if (ymax <= 0)
    ymax = 1;
  ymax *= 1.05;
  auto py = [&](double y) { return T + (1 - y / ymax) * (H - T - B); };
  std::ostringstream os;
  char buf[160];
  openSvg(os, W, H, L + frameW / 2, chart.title);
  for (double t : niceTicks(0, ymax, 6))
    yGridLine(os, L, L + frameW, py(t), t);
  const double barW = (groupW - 30) / double(std::max<size_t>(1, chart.series.size()));
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    const double x0 = L + groupW * double(c) + 15;
    for (size_t s = 0; s < chart.series.size(); ++s) {
      const double v = c < chart.series[s].values.size() ? chart.series[s].values[c] : NAN;
      if (!std::isfinite(v) || v < 0)
        continue;
      std::snprintf(buf, sizeof buf, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='",
                    x0 + barW * double(s), py(v), barW - 4, H - B - py(v));
      os << buf << chart.series[s].color << "'/>\n";
    }
    os << "<text x='" << x0 << "' y='" << H - B + 16 << "' font-size='10'>"
       << escape(chart.categories[c]) << "</text>\n";
  }
  os << "<line x1='" << L << "' y1='" << H - B << "' x2='" << L + frameW << "' y2='" << H - B
     << "' stroke='black'/>\n";
  yAxisLabel(os, (T + H - B) / 2, chart.yLabel);
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const double ly = T + 6 + 18 * double(s), lx = L + frameW + 12;
    os << "<rect x='" << lx << "' y='" << ly << "' width='14' height='10' fill='"
       << chart.series[s].color << "'/>\n<text x='" << lx + 20 << "' y='" << ly + 10 << "'>"
       << escape(chart.series[s].name) << "</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

Status writeBarChart(const std::string &path, const BarChart &chart) {
  return fs::writeFileAtomic(path, renderBarChart(chart));
}

} // namespace attnc::plot
