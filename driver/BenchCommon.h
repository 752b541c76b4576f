//===- BenchCommon.h - Helpers shared by the attnc bench modes --*- C++ -*-===//
#ifndef ATTNC_DRIVER_BENCHCOMMON_H
#define ATTNC_DRIVER_BENCHCOMMON_H

#include "runtime/KernelHeaders.h"
#include "runtime/CpuAttention.h"
#include "runtime/HostCompiler.h"
#include "runtime/KernelCache.h"
#include "runtime/Safetensors.h"
#include "runtime/tune/Measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace attnc::driver::bench {

using Clock = std::chrono::steady_clock;

// The measuring half is the runtime's (runtime/tune/Measure.h).
using tune::median;
using tune::medianMs;
using tune::randomTensor;

inline std::string fmt(double v, int prec = 2) {
  if (std::isnan(v))
    return "-";
  std::ostringstream os;
  os << std::fixed << std::setprecision(prec) << v;
  return os.str();
}

/// Compiles and loads a benchmark's own C++ (baselines, probes) like the
/// generated kernels: same compiler, flags, kernel headers and cache, with
/// OpenBLAS for the GEMMs.
inline Expected<SharedObject> compileBenchSource(const std::string &programName,
                                                 const std::string &source) {
  static HostCompiler compiler(&KernelCache::processDefault());
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cpu);
  if (!dirs)
    return dirs.takeError();
  HostCompileOptions options;
  options.includeDirs = *dirs;
  options.flags = {"-DATTNC_USE_CBLAS", "-lopenblas"};
  return compiler.compileAndLoad(programName, source, options);
}

/// One line of a plot: (x, y) points (NaN y: left out), a colour index and
/// an SVG stroke-dasharray ("" solid).
struct PlotLine {
  std::string label;
  std::vector<std::pair<double, double>> points;
  int color = 0;
  std::string dash;
};

/// An SVG line plot with a log x axis (labelled at `xTicks`) and a linear y
/// axis from 0, legend on the right. Returns false when `path` cannot be
/// written.
inline bool writeLinePlot(const std::string &path, const std::string &title,
                          const std::vector<double> &xTicks, const std::vector<PlotLine> &lines) {
  const double W = 720, Hh = 420, L = 60, R = 230, T = 30, Bm = 50;
  double xmin = 1e300, xmax = 0, ymax = 0;
  for (double x : xTicks)
    xmin = std::min(xmin, x), xmax = std::max(xmax, x);
  for (const PlotLine &l : lines)
    for (auto [x, y] : l.points)
      if (!std::isnan(y))
        xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymax = std::max(ymax, y);
  if (ymax <= 0)
    ymax = 1;
  auto px = [&](double x) {
    return L + (xmax > xmin ? std::log(x / xmin) / std::log(xmax / xmin) : 0.5) * (W - L - R);
  };
  auto py = [&](double y) { return T + (1 - y / (ymax * 1.05)) * (Hh - T - Bm); };
  std::ofstream os(path);
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << Hh
     << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
        "fill='white'/>\n<text x='"
     << L << "' y='18'>" << title << "</text>\n<line x1='" << L << "' y1='" << Hh - Bm << "' x2='"
     << W - R << "' y2='" << Hh - Bm << "' stroke='black'/>\n<line x1='" << L << "' y1='" << T
     << "' x2='" << L << "' y2='" << Hh - Bm << "' stroke='black'/>\n";
  for (double x : xTicks)
    os << "<text x='" << px(x) - 14 << "' y='" << Hh - Bm + 16 << "'>" << x << "</text>\n";
  for (double y : {0.0, ymax / 2, ymax})
    os << "<text x='4' y='" << py(y) + 4 << "'>" << fmt(y, y < 10 ? 2 : 0) << "</text>\n";
  const char *colors[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#7f7f7f"};
  int legend = 0;
  for (const PlotLine &l : lines) {
    std::string pts;
    for (auto [x, y] : l.points)
      if (!std::isnan(y))
        pts += fmt(px(x), 1) + "," + fmt(py(y), 1) + " ";
    if (pts.empty())
      continue;
    const char *c = colors[l.color % 6];
    std::string dash = l.dash.empty() ? "" : " stroke-dasharray='" + l.dash + "'";
    double ly = T + 18 * legend;
    os << "<polyline fill='none' stroke-width='2' stroke='" << c << "'" << dash << " points='"
       << pts << "'/>\n<line x1='" << W - R + 8 << "' y1='" << ly + 6 << "' x2='" << W - R + 30
       << "' y2='" << ly + 6 << "' stroke-width='2' stroke='" << c << "'" << dash << "/>\n<text x='"
       << W - R + 36 << "' y='" << ly + 10 << "' fill='" << c << "'>" << l.label << "</text>\n";
    ++legend;
  }
  os << "</svg>\n";
  return bool(os);
}

/// One series of a bar chart: a value per category (NaN: no bar).
struct BarSeries {
  std::string label;
  std::vector<double> values;
  int color = 0;
};

/// An SVG grouped bar chart (a group of bars per category, linear y from 0,
/// category labels below, legend on the right). False when `path` cannot
/// be written.
inline bool writeBarPlot(const std::string &path, const std::string &title,
                         const std::vector<std::string> &categories,
                         const std::vector<BarSeries> &series) {
  const double groupW = 150, L = 60, R = 160, T = 30, Bm = 70, Hh = 380;
  const double W = L + R + groupW * double(std::max<size_t>(1, categories.size()));
  double ymax = 0;
  for (const BarSeries &s : series)
    for (double v : s.values)
      if (!std::isnan(v))
        ymax = std::max(ymax, v);
  if (ymax <= 0)
    ymax = 1;
  auto py = [&](double y) { return T + (1 - y / (ymax * 1.05)) * (Hh - T - Bm); };
  const char *colors[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#7f7f7f"};
  std::ofstream os(path);
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << Hh
     << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
        "fill='white'/>\n<text x='"
     << L << "' y='18'>" << title << "</text>\n<line x1='" << L << "' y1='" << Hh - Bm << "' x2='"
     << W - R << "' y2='" << Hh - Bm << "' stroke='black'/>\n";
  for (double y : {0.0, ymax / 2, ymax})
    os << "<text x='4' y='" << py(y) + 4 << "'>" << fmt(y, y < 10 ? 2 : 0) << "</text>\n";
  const double barW = (groupW - 30) / double(std::max<size_t>(1, series.size()));
  for (size_t c = 0; c < categories.size(); ++c) {
    const double x0 = L + groupW * double(c) + 15;
    for (size_t s = 0; s < series.size(); ++s) {
      double v = c < series[s].values.size() ? series[s].values[c] : NAN;
      if (std::isnan(v))
        continue;
      os << "<rect x='" << fmt(x0 + barW * double(s), 1) << "' y='" << fmt(py(v), 1) << "' width='"
         << fmt(barW - 4, 1) << "' height='" << fmt(Hh - Bm - py(v), 1) << "' fill='"
         << colors[series[s].color % 6] << "'/>\n";
    }
    os << "<text x='" << x0 << "' y='" << Hh - Bm + 16 << "' font-size='10'>" << categories[c]
       << "</text>\n";
  }
  for (size_t s = 0; s < series.size(); ++s) {
    double ly = T + 18 * double(s);
    os << "<rect x='" << W - R + 10 << "' y='" << ly << "' width='14' height='10' fill='"
       << colors[series[s].color % 6] << "'/>\n<text x='" << W - R + 30 << "' y='" << ly + 10
       << "'>" << series[s].label << "</text>\n";
  }
  os << "</svg>\n";
  return bool(os);
}

} // namespace attnc::driver::bench

#endif // ATTNC_DRIVER_BENCHCOMMON_H
