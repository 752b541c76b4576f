//===- Safetensors.cpp - Read and write .safetensors files ----------------===//
#include "runtime/Safetensors.h"

#include "runtime/FileSystem.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace attnc::st {

namespace {

struct DTypeInfo {
  DType dtype;
  const char *name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {{DType::F64, "F64", 8}, {DType::F32, "F32", 4},
                                 {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2},
                                 {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
                                 {DType::I16, "I16", 2}, {DType::I8, "I8", 1},
                                 {DType::U8, "U8", 1},   {DType::Bool, "BOOL", 1}};

/// Header JSON larger than this is refused (real headers are kilobytes).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

} // namespace

const char *dtypeName(DType t) {
  for (const DTypeInfo &d : kDTypes)
    if (d.dtype == t)
      return d.name;
  return "?";
}

size_t dtypeSize(DType t) {
  for (const DTypeInfo &d : kDTypes)
    if (d.dtype == t)
      return d.size;
  return 0;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string Tensor::shapeStr() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {
template <typename T>
Tensor fromValues(DType dtype, std::vector<int64_t> shape, const std::vector<T> &values) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(values.size() * sizeof(T));
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}
} // namespace

Tensor Tensor::f32(std::vector<int64_t> shape, const std::vector<float> &values) {
  return fromValues(DType::F32, std::move(shape), values);
}

Tensor Tensor::i32(std::vector<int64_t> shape, const std::vector<int32_t> &values) {
  return fromValues(DType::I32, std::move(shape), values);
}

std::vector<float> Tensor::asF32() const {
  std::vector<float> v(data.size() / sizeof(float));
  std::memcpy(v.data(), data.data(), v.size() * sizeof(float));
  return v;
}

bool parse(const std::vector<uint8_t> &bytes, const std::string &name, File &out,
           std::string &err) {
  out = File();
  auto bad = [&](const std::string &msg) {
    err = name + ": " + msg;
    return false;
  };
  if (bytes.size() < 8)
    return bad("not a safetensors file: " + std::to_string(bytes.size()) +
               " bytes, fewer than the 8-byte header length");
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)
    headerLen = (headerLen << 8) | bytes[i];
  if (headerLen > kMaxHeaderBytes || headerLen > bytes.size() - 8)
    return bad("not a safetensors file: header length " + std::to_string(headerLen) +
               " exceeds the file size " + std::to_string(bytes.size()));
  const uint8_t *dataBegin = bytes.data() + 8 + headerLen;
  uint64_t dataSize = bytes.size() - 8 - headerLen;

  nlohmann::json header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + headerLen,
                                                nullptr, /*exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    return bad("the header is not a JSON object");

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string &key = it.key();
    const nlohmann::json &entry = it.value();
    if (key == "__metadata__") {
      if (!entry.is_object())
        return bad("__metadata__ must be an object of strings");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string())
          return bad("__metadata__ value '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto badTensor = [&](const std::string &msg) { return bad("tensor '" + key + "': " + msg); };
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets"))
      return badTensor("expected an object with dtype, shape and data_offsets");
    const nlohmann::json &dt = entry["dtype"];
    const DTypeInfo *info = nullptr;
    if (dt.is_string())
      for (const DTypeInfo &d : kDTypes)
        if (dt.get<std::string>() == d.name)
          info = &d;
    if (!info)
      return badTensor("unsupported dtype " + dt.dump());
    Tensor t;
    t.dtype = info->dtype;
    const nlohmann::json &shape = entry["shape"];
    if (!shape.is_array() || shape.size() > 16)
      return badTensor("shape must be an array of at most 16 dimensions");
    uint64_t numel = 1;
    for (const nlohmann::json &d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40))
        return badTensor("shape " + shape.dump() + " has an invalid dimension");
      t.shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
      if (numel > (uint64_t(1) << 40))
        return badTensor("shape " + shape.dump() + " is too large");
    }
    const nlohmann::json &offs = entry["data_offsets"];
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() ||
        !offs[1].is_number_unsigned())
      return badTensor("data_offsets must be [begin, end]");
    uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    if (begin > end || end > dataSize)
      return badTensor("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                       "] outside the data section of " + std::to_string(dataSize) + " bytes");
    if (end - begin != numel * info->size)
      return badTensor("holds " + std::to_string(end - begin) + " bytes but " + info->name + " " +
                       t.shapeStr() + " needs " + std::to_string(numel * info->size));
    t.data.assign(dataBegin + begin, dataBegin + end);
    ranges.push_back({begin, end});
    out.tensors.emplace(key, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      return bad("tensor data ranges overlap at byte " + std::to_string(ranges[i].first));
  return true;
}

bool read(const std::string &path, File &out, std::string &err) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    err = path + ": cannot open for reading";
    return false;
  }
  std::streamoff size = in.tellg();
  if (size < 0) {
    err = path + ": cannot read (not a regular file?)";
    return false;
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (size && !in.read(reinterpret_cast<char *>(bytes.data()), size)) {
    err = path + ": read failed";
    return false;
  }
  return parse(bytes, path, out, err);
}

std::vector<uint8_t> serialize(const File &file) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto &[name, t] : file.tensors) {
    header[name] = {{"dtype", dtypeName(t.dtype)},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  if (!file.metadata.empty())
    header["__metadata__"] = file.metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // align the data to 8 bytes
  std::vector<uint8_t> bytes(8 + text.size() + offset);
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<uint8_t>(len >> (8 * i));
  uint8_t *out = bytes.data() + 8;
  std::memcpy(out, text.data(), text.size());
  out += text.size();
  for (const auto &entry : file.tensors) {
    if (!entry.second.data.empty())
      std::memcpy(out, entry.second.data.data(), entry.second.data.size());
    out += entry.second.data.size();
  }
  return bytes;
}

bool write(const std::string &path, const File &file, std::string &err) {
  std::vector<uint8_t> bytes = serialize(file);
  Status written = fs::writeFileAtomic(
      path, std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
  if (!written) {
    err = written.error();
    return false;
  }
  return true;
}

} // namespace attnc::st
