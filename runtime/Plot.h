//===- Plot.h - Line plots and bar charts as SVG ---------------*- C++ -*-===//
//
// The project's one SVG writer, in plain SVG (no dependency): `attnc train`'s
// loss.svg, `attnc plot`'s runs, and the benchmarks' and the tuner's
// figures. Line plots have labelled axes, ticks at round numbers (or at the
// caller's values), linear or logarithmic axes, a legend and a title; a
// series may be faint (the raw training loss behind its smoothed curve),
// dashed, or marked (held-out evaluations, one dot each). Bar charts group a
// bar per series in each category.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_PLOT_H
#define ATTNC_RUNTIME_PLOT_H

#include "runtime/Error.h"

#include <string>
#include <vector>

namespace attnc::plot {

/// The colour of series `index` in the shared palette (8 colours, cycling).
const char *paletteColor(int index);

struct Series {
  std::string name; ///< legend text (empty: not in the legend)
  std::vector<double> x, y;
  std::string color = "#1f77b4";
  double width = 1.5, opacity = 1.0;
  bool markers = false; ///< a dot at every point
  std::string dash;     ///< an SVG stroke-dasharray ("": solid)
};

enum class Scale { Linear, Log };

struct LinePlot {
  std::string title, xLabel, yLabel;
  std::vector<Series> series;
  Scale xScale = Scale::Linear, yScale = Scale::Linear;
  bool yFromZero = false;     ///< a linear y axis starts at 0
  std::vector<double> xTicks; ///< tick values (empty: round numbers)
  bool legendOutside = false; ///< the legend right of the frame, not inside it
};

/// The plot as SVG text. Non-finite points (and non-positive ones on a log
/// axis) are skipped, and so is a series with no point left; the axes span
/// the points drawn.
std::string renderLinePlot(const LinePlot &plot);
/// renderLinePlot, written atomically to `path`.
Status writeLinePlot(const std::string &path, const LinePlot &plot);

struct BarSeries {
  std::string name;
  std::vector<double> values; ///< one per category (NaN: no bar)
  std::string color = "#1f77b4";
};

struct BarChart {
  std::string title, yLabel;
  std::vector<std::string> categories;
  std::vector<BarSeries> series;
};

/// The chart as SVG text: a linear y axis from 0, a group of bars per
/// category, category labels below and the legend on the right.
std::string renderBarChart(const BarChart &chart);
/// renderBarChart, written atomically to `path`.
Status writeBarChart(const std::string &path, const BarChart &chart);

/// A centred moving average over `window` points (shorter at the ends):
/// the smoothed curve drawn over a noisy training loss.
std::vector<double> movingAverage(const std::vector<double> &values, int window);

/// About `count` round tick values (1, 2 or 5 times a power of ten apart)
/// covering [lo, hi].
std::vector<double> niceTicks(double lo, double hi, int count);
/// Ticks for a log axis over [lo, hi] (0 < lo < hi): 1, 2 and 5 times the
/// powers of ten inside it, thinned to powers of ten when there are more
/// than `count`; lo and hi themselves when fewer than two fall inside.
std::vector<double> logTicks(double lo, double hi, int count);

} // namespace attnc::plot

#endif // ATTNC_RUNTIME_PLOT_H
