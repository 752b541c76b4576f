//===- Safetensors.h - Read and write .safetensors files --------*- C++ -*-===//
//
// The tensor format of inputs, outputs, weights and checkpoints, so PyTorch
// users can exchange tensors with attnc. Layout: an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}} with an
// optional "__metadata__" string map, then the raw little-endian data.
// Reading validates everything (offsets, sizes, overlaps) and reports what is
// wrong by tensor name; writing is atomic (temporary file, fsync, rename).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_SAFETENSORS_H
#define ATTNC_RUNTIME_SAFETENSORS_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attnc::st {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, Bool };

/// The safetensors spelling ("F32", "BF16", ...).
const char *dtypeName(DType t);
size_t dtypeSize(DType t);

struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data; ///< little-endian, row-major

  int64_t numel() const;
  std::string shapeStr() const; ///< "[2, 4, 128]"

  static Tensor f32(std::vector<int64_t> shape, const std::vector<float> &values);
  static Tensor i32(std::vector<int64_t> shape, const std::vector<int32_t> &values);
  /// Copies the data out as floats; requires dtype F32.
  std::vector<float> asF32() const;
};

struct File {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// Reads `path` into `out`. On failure returns false with `err` naming the
/// file and, where it applies, the tensor and the offending value.
bool read(const std::string &path, File &out, std::string &err);
/// Parses an in-memory safetensors image (used by read() and the tests).
bool parse(const std::vector<uint8_t> &bytes, const std::string &name, File &out, std::string &err);
/// Serialises `file`; tensors are laid out in name order.
std::vector<uint8_t> serialize(const File &file);
/// Writes `file` to `path` atomically: a reader sees the old file or the new
/// one, never a partial write.
bool write(const std::string &path, const File &file, std::string &err);

} // namespace attnc::st

#endif // ATTNC_RUNTIME_SAFETENSORS_H
