//===- Plot.cpp - Line plots as SVG, for training curves ------------------===//
#include "runtime/train/Plot.h"

#include "runtime/FileSystem.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace attnc::train {

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

std::string renderLinePlot(const LinePlot &plot) {
  const double W = 720, H = 420, L = 70, R = 24, T = 40, B = 56;
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  for (const PlotSeries &s : plot.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
        xlo = std::min(xlo, s.x[i]), xhi = std::max(xhi, s.x[i]);
        ylo = std::min(ylo, s.y[i]), yhi = std::max(yhi, s.y[i]);
      }
  if (!(xhi >= xlo))
    xlo = 0, xhi = 1, ylo = 0, yhi = 1;
  if (xhi - xlo < 1e-12)
    xhi = xlo + 1;
  if (yhi - ylo < 1e-12)
    yhi = ylo + 1;
  const double pad = (yhi - ylo) * 0.04; // keep curves off the frame
  ylo -= pad, yhi += pad;
  auto px = [&](double x) { return L + (x - xlo) / (xhi - xlo) * (W - L - R); };
  auto py = [&](double y) { return T + (1 - (y - ylo) / (yhi - ylo)) * (H - T - B); };
  std::ostringstream os;
  char buf[96];
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
     << "' font-family='sans-serif' font-size='12'>\n"
     << "<rect width='100%' height='100%' fill='white'/>\n"
     << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='14'>"
     << escape(plot.title) << "</text>\n";
  // Grid and tick labels.
  for (double t : niceTicks(ylo, yhi, 6)) {
    std::snprintf(buf, sizeof buf, "%.1f", py(t));
    os << "<line x1='" << L << "' y1='" << buf << "' x2='" << W - R << "' y2='" << buf
       << "' stroke='#e4e4e4'/>\n<text x='" << L - 6 << "' y='" << py(t) + 4
       << "' text-anchor='end'>" << number(t) << "</text>\n";
  }
  for (double t : niceTicks(xlo, xhi, 8)) {
    std::snprintf(buf, sizeof buf, "%.1f", px(t));
    os << "<line x1='" << buf << "' y1='" << T << "' x2='" << buf << "' y2='" << H - B
       << "' stroke='#e4e4e4'/>\n<text x='" << buf << "' y='" << H - B + 16
       << "' text-anchor='middle'>" << number(t) << "</text>\n";
  }
  os << "<rect x='" << L << "' y='" << T << "' width='" << W - L - R << "' height='" << H - T - B
     << "' fill='none' stroke='black'/>\n"
     << "<text x='" << (L + W - R) / 2 << "' y='" << H - 14 << "' text-anchor='middle'>"
     << escape(plot.xLabel) << "</text>\n"
     << "<text transform='translate(16," << (T + H - B) / 2
     << ") rotate(-90)' text-anchor='middle'>" << escape(plot.yLabel) << "</text>\n";
  // The curves, in order (faint ones first by the caller's choice).
  for (const PlotSeries &s : plot.series) {
    os << "<polyline fill='none' stroke='" << s.color << "' stroke-width='" << s.width
       << "' stroke-opacity='" << s.opacity << "' points='";
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
        std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px(s.x[i]), py(s.y[i]));
        os << buf;
      }
    os << "'/>\n";
    if (s.markers)
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        if (std::isfinite(s.x[i]) && std::isfinite(s.y[i]))
          os << "<circle cx='" << px(s.x[i]) << "' cy='" << py(s.y[i]) << "' r='3.5' fill='"
             << s.color << "'/>\n";
  }
  // The legend, top right, on white so curves behind it stay readable.
  size_t longest = 0, entries = 0;
  for (const PlotSeries &s : plot.series)
    if (!s.name.empty())
      longest = std::max(longest, s.name.size()), ++entries;
  if (entries) {
    const double lw = 40 + 6.6 * double(longest), lx = W - R - 8 - lw;
    os << "<rect x='" << lx << "' y='" << T + 6 << "' width='" << lw << "' height='"
       << 16 * entries + 8 << "' fill='white' fill-opacity='0.85' stroke='#cccccc'/>\n";
    double ly = T + 22;
    for (const PlotSeries &s : plot.series) {
      if (s.name.empty())
        continue;
      os << "<line x1='" << lx + 6 << "' y1='" << ly - 4 << "' x2='" << lx + 30 << "' y2='"
         << ly - 4 << "' stroke='" << s.color << "' stroke-width='" << std::max(2.0, s.width)
         << "' stroke-opacity='" << s.opacity << "'/>\n<text x='" << lx + 36 << "' y='" << ly
         << "'>" << escape(s.name) << "</text>\n";
      ly += 16;
    }
  }
  os << "</svg>\n";
  return os.str();
}

Status writeLinePlot(const std::string &path, const LinePlot &plot) {
  return fs::writeFileAtomic(path, renderLinePlot(plot));
}

} // namespace attnc::train
