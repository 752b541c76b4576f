//===- PlotTest.cpp - runtime/Plot.h: the one SVG writer ------------------===//
//
// Ticks at round numbers on linear and log axes, points that cannot be drawn
// left out (and a series with none left out entirely), text escaped, dashes
// and legends, bar charts with one bar per finite value, and atomic writes.
//
//===----------------------------------------------------------------------===//
#include "runtime/Plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

using namespace attnc::plot;

namespace {

size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

/// The polyline's points as written ("x,y x,y ").
std::string firstPoints(const std::string &svg) {
  const size_t at = svg.find("points='");
  if (at == std::string::npos)
    return "";
  const size_t from = at + 8;
  return svg.substr(from, svg.find('\'', from) - from);
}

TEST(Plot, NiceTicksAreRoundAndCoverTheRange) {
  std::vector<double> t = niceTicks(0.13, 0.91, 6);
  ASSERT_FALSE(t.empty());
  EXPECT_NEAR(t.front(), 0.2, 1e-12);
  EXPECT_NEAR(t.back(), 0.8, 1e-12);
  for (size_t i = 1; i < t.size(); ++i)
    EXPECT_NEAR(t[i] - t[i - 1], 0.2, 1e-12);
  EXPECT_EQ(niceTicks(3, 3, 6), std::vector<double>{3});
}

TEST(Plot, LogTicksAreOneTwoFiveTimesPowersOfTen) {
  EXPECT_EQ(logTicks(1, 100, 8), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  // Too many for 4: the powers of ten only.
  EXPECT_EQ(logTicks(1, 1000, 4), (std::vector<double>{1, 10, 100, 1000}));
  // Fewer than two inside: the ends.
  EXPECT_EQ(logTicks(3, 4, 8), (std::vector<double>{3, 4}));
}

TEST(Plot, PointsThatCannotBeDrawnAreLeftOut) {
  LinePlot p;
  p.series.push_back({"a", {1, 2, 3, 4}, {1, NAN, 3, INFINITY}});
  p.series.push_back({"empty", {1, 2}, {NAN, NAN}});
  const std::string svg = renderLinePlot(p);
  EXPECT_EQ(count(svg, "<polyline"), 1u);
  EXPECT_EQ(count(firstPoints(svg), ","), 2u); // two drawable points
  EXPECT_EQ(count(svg, ">empty</text>"), 0u) << "a series with no point has no legend entry";
  EXPECT_EQ(count(svg, ">a</text>"), 1u);
  // On a log axis, non-positive values cannot be drawn either.
  LinePlot l;
  l.yScale = Scale::Log;
  l.series.push_back({"", {1, 2, 3}, {0.5, 0, -1}});
  l.series.push_back({"", {1, 2}, {5, 50}});
  const std::string logSvg = renderLinePlot(l);
  EXPECT_EQ(count(firstPoints(logSvg), ","), 1u);
}

TEST(Plot, LogAxisPlacesDecadesEvenly) {
  LinePlot p;
  p.xScale = Scale::Log;
  p.series.push_back({"", {1, 10, 100}, {0, 0, 0}});
  const std::string pts = firstPoints(renderLinePlot(p));
  double x0, x1, x2, y;
  ASSERT_EQ(std::sscanf(pts.c_str(), "%lf,%lf %lf,%lf %lf,%lf", &x0, &y, &x1, &y, &x2, &y), 6);
  EXPECT_NEAR(x1 - x0, x2 - x1, 0.11);
  EXPECT_GT(x1 - x0, 100);
}

TEST(Plot, TextIsEscapedAndDashesAndMarkersDrawn) {
  LinePlot p;
  p.title = "a < b & c";
  p.series.push_back({"k=16 <fused>", {1, 2}, {1, 2}, "#123456", 2.0, 1.0, true, "2,3"});
  const std::string svg = renderLinePlot(p);
  EXPECT_NE(svg.find(">a &lt; b &amp; c</text>"), std::string::npos);
  EXPECT_NE(svg.find(">k=16 &lt;fused&gt;</text>"), std::string::npos);
  EXPECT_EQ(count(svg, "stroke-dasharray='2,3'"), 2u); // the curve and its legend line
  EXPECT_EQ(count(svg, "<circle"), 2u);
}

TEST(Plot, LegendOutsideWidensTheFigure) {
  LinePlot p;
  p.series.push_back({"a fairly long legend entry", {1, 2}, {1, 2}});
  const std::string inside = renderLinePlot(p);
  p.legendOutside = true;
  const std::string outside = renderLinePlot(p);
  EXPECT_NE(inside.find("width='720'"), std::string::npos);
  EXPECT_EQ(outside.find("width='720'"), std::string::npos);
}

TEST(Plot, BarChartHasOneBarPerFiniteValue) {
  BarChart c{"tuned vs heuristic", "ms", {"x", "y", "z"}, {}};
  c.series.push_back({"heuristic", {1.0, 2.0, NAN}, paletteColor(1)});
  c.series.push_back({"tuned", {0.5, 1.5, 3.0}, paletteColor(2)});
  const std::string svg = renderBarChart(c);
  // 5 bars, 2 legend swatches and the background.
  EXPECT_EQ(count(svg, "<rect"), 8u);
  EXPECT_NE(svg.find(">tuned vs heuristic</text>"), std::string::npos);
  EXPECT_EQ(count(svg, std::string("fill='") + paletteColor(2) + "'"), 4u); // 3 bars + swatch
}

TEST(Plot, WritesAtomicallyAndReportsAnUnwritablePath) {
  char dir[] = "/tmp/attnc-plot-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/p.svg";
  LinePlot p;
  p.series.push_back({"", {1, 2}, {1, 2}});
  ASSERT_TRUE(bool(writeLinePlot(path, p)));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), renderLinePlot(p));
  attnc::Status bad = writeBarChart(std::string(dir) + "/missing/folder/c.svg", BarChart{});
  EXPECT_FALSE(bool(bad));
  EXPECT_NE(bad.error().find("missing/folder"), std::string::npos) << bad.error();
  std::remove(path.c_str());
  rmdir(dir);
}

TEST(Plot, PaletteCycles) {
  EXPECT_STREQ(paletteColor(0), paletteColor(8));
  EXPECT_STRNE(paletteColor(0), paletteColor(1));
}

} // namespace
