//===- PlotRuns.cpp - attnc plot: training runs side by side --------------===//
#include "driver/PlotRuns.h"
#include "driver/Report.h"
#include "driver/Spec.h"

#include "runtime/FileSystem.h"
#include "runtime/Plot.h"

#include <cmath>
#include <ostream>
#include <sstream>

namespace attnc::driver {

namespace {

/// The first two columns (step, loss) of a run's CSV log, header skipped.
Expected<std::pair<std::vector<double>, std::vector<double>>> readLog(const std::string &path) {
  Expected<std::string> text = fs::readFile(path);
  if (!text)
    return text.takeError();
  std::istringstream in(*text);
  std::string line;
  std::vector<double> steps, losses;
  int lineNo = 0;
  while (std::getline(in, line)) {
    if (++lineNo == 1 || line.empty())
      continue;
    char *end = nullptr;
    double step = std::strtod(line.c_str(), &end);
    if (end == line.c_str() || *end != ',')
      return makeError(path + ":" + std::to_string(lineNo) + ": expected 'step,loss,...', found '" +
                       line + "'");
    char *endv = nullptr;
    double loss = std::strtod(end + 1, &endv);
    if (endv == end + 1)
      return makeError(path + ":" + std::to_string(lineNo) + ": no loss after the step");
    steps.push_back(step), losses.push_back(loss);
  }
  return std::make_pair(steps, losses);
}

std::string baseName(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  size_t slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

} // namespace

mlir::LogicalResult runPlot(const PlotCliOptions &opt) {
  if (opt.runs.empty())
    return commandError("plot", "name at least one run directory");
  if (!opt.labels.empty() && opt.labels.size() != opt.runs.size())
    return commandError("plot", "--labels names " + std::to_string(opt.labels.size()) +
                                    " run(s) but " + std::to_string(opt.runs.size()) +
                                    " are given");
  if (opt.what != "held-out" && opt.what != "training" && opt.what != "both")
    return commandError("plot", "--what " + opt.what + ": expected held-out, training or both");
  plot::LinePlot plot;
  plot.title = opt.title.empty() ? "attnc runs" : opt.title;
  plot.xLabel = "step";
  plot.yLabel = "loss (nats per predicted byte)";
  for (size_t i = 0; i < opt.runs.size(); ++i) {
    const std::string label = opt.labels.empty() ? baseName(opt.runs[i]) : opt.labels[i];
    const std::string color = plot::paletteColor(int(i));
    if (opt.what != "held-out") {
      auto log = readLog(opt.runs[i] + "/train.csv");
      if (!log)
        return commandError("plot", log.error());
      for (double &s : log->first)
        s += 1; // a step's loss belongs to the state after it
      const int window = std::max(1, int(log->second.size() / 50)) * 2 + 1;
      plot.series.push_back({label + (opt.what == "both" ? " (training, smoothed)" : ""),
                             log->first, plot::movingAverage(log->second, window), color,
                             opt.what == "both" ? 1.2 : 2.0, opt.what == "both" ? 0.5 : 1.0,
                             false});
    }
    if (opt.what != "training") {
      auto log = readLog(opt.runs[i] + "/eval.csv");
      if (!log)
        return commandError("plot", log.error() + " (runs from attnc train write eval.csv)");
      plot.series.push_back({label + (opt.what == "both" ? " (held-out)" : ""), log->first,
                             log->second, color, 2.0, 1.0, true});
      if (!log->second.empty())
        results() << label << ": held-out loss " << log->second.back() << " ("
                  << log->second.back() / std::log(2.0) << " bits/byte) at step "
                  << int64_t(log->first.back()) << "\n";
    }
  }
  if (Status s = plot::writeLinePlot(opt.output, plot); !s)
    return commandError("plot", s.error());
  results() << "wrote " << opt.output << "\n";
  return mlir::success();
}

} // namespace attnc::driver
