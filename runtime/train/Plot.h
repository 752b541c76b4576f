//===- Plot.h - Line plots as SVG, for training curves ----------*- C++ -*-===//
//
// What `attnc train` draws into loss.svg and `attnc plot` draws from run
// directories: curves with labelled axes, tick values at round numbers, a
// legend and a title, in plain SVG (no dependency). A series may be faint
// (the raw training loss behind its smoothed curve) or marked (held-out
// evaluations, one point each).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_PLOT_H
#define ATTNC_RUNTIME_TRAIN_PLOT_H

#include "runtime/Error.h"

#include <string>
#include <vector>

namespace attnc::train {

struct PlotSeries {
  std::string name; ///< legend text (empty: not in the legend)
  std::vector<double> x, y;
  std::string color = "#1f77b4";
  double width = 1.5, opacity = 1.0;
  bool markers = false; ///< a dot at every point
};

struct LinePlot {
  std::string title, xLabel, yLabel;
  std::vector<PlotSeries> series;
};

/// The plot as SVG text. Non-finite points are skipped; the axes span the
/// finite points, with round-number ticks.
std::string renderLinePlot(const LinePlot &plot);
/// renderLinePlot, written atomically to `path`.
Status writeLinePlot(const std::string &path, const LinePlot &plot);

/// A centred moving average over `window` points (shorter at the ends):
/// the smoothed curve drawn over a noisy training loss.
std::vector<double> movingAverage(const std::vector<double> &values, int window);

/// About `count` round tick values (1, 2 or 5 times a power of ten apart)
/// covering [lo, hi].
std::vector<double> niceTicks(double lo, double hi, int count);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_PLOT_H
