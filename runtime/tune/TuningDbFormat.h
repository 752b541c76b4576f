//===- TuningDbFormat.h - The tuning database's JSON format -----*- C++ -*-===//
//
// Private to runtime/tune (TuningDb.cpp, TuningDbFormat.cpp, TuningKeys.cpp):
// the file format of a tuning database (one JSON document of entries, its
// format version, duplicate entries merged), how two entries' measurements
// and choices merge, and the number format of tables.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TUNE_TUNINGDBFORMAT_H
#define ATTNC_RUNTIME_TUNE_TUNINGDBFORMAT_H

#include "runtime/tune/TuningDb.h"

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnc::tune::format {

/// A document that is not a tuning database; what() completes "the file ...".
struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Adds `mine`'s measurements to `into`'s (configs measured in both: the
/// newer wins).
void mergeMeasurements(Entry &into, const Entry &mine);
/// Takes `mine`'s choice (config, time, pin) into `into` when it has one.
void takeChoice(Entry &into, const Entry &mine);
/// Parses a whole document into `out`; throws FormatError.
void parseDocument(const std::string &text, std::map<std::string, Entry> &out);
/// Loads `path` (missing = empty); the error names the file.
Expected<std::map<std::string, Entry>> loadFile(const std::string &path);
/// The document of `entries` (with their measurements, or only the
/// choices; every entry pinned with `forcePinned`).
Expected<std::string> dumpDocument(const std::vector<const Entry *> &entries, bool withMeasured,
                                   bool forcePinned);
/// A time in ms for tables: 4 decimals, "-" when not finite.
std::string formatMs(double v);

} // namespace attnc::tune::format

#endif // ATTNC_RUNTIME_TUNE_TUNINGDBFORMAT_H
