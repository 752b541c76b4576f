//===- AttentionIO.cpp - Inputs and outputs of one attention op -----------===//
#include "runtime/AttentionIO.h"

#include "runtime/PhiloxDraws.h"

#include <algorithm>
#include <cmath>

namespace attnc {

namespace {

/// Checks one tensor's dtype and shape (-1: any size).
Status expectTensor(const std::string &file, const std::string &name, const st::Tensor &t,
                    st::DType dtype, const std::vector<int64_t> &shape, const std::string &what) {
  bool ok = t.dtype == dtype && t.shape.size() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i)
    ok = shape[i] < 0 || shape[i] == t.shape[i];
  if (ok)
    return {};
  std::string want = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    want += (i ? ", " : "") + (shape[i] < 0 ? std::string("*") : std::to_string(shape[i]));
  return makeError(file + ": tensor '" + name + "' is " + st::dtypeName(t.dtype) + " " +
                   t.shapeStr() + "; expected " + st::dtypeName(dtype) + " " + want + "]" +
                   (what.empty() ? "" : " " + what));
}

/// Counter-based normal samples: the same (seed, tensor, index) always gives
/// the same value, on any machine and in any order.
float normalAt(uint64_t seed, const std::string &tensor, uint64_t index) {
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t key = seed;
  for (char c : tensor)
    key = mix(key ^ static_cast<uint8_t>(c));
  uint64_t a = mix(key ^ (2 * index)), b = mix(key ^ (2 * index + 1));
  double u1 = (double(a >> 11) + 1.0) / 9007199254740993.0; // (0, 1]
  double u2 = double(b >> 11) / 9007199254740992.0;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

const st::Tensor *find(const st::File &f, const std::string &name) {
  auto it = f.tensors.find(name);
  return it == f.tensors.end() ? nullptr : &it->second;
}

} // namespace

st::Tensor randomProjection(uint64_t seed, const std::string &name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  int64_t k = shape[shape.size() - 2], nmax = shape.back();
  // Xavier-normal scale over [k, Nmax], as fairseq initialises Linformer's E.
  float stddev = float(std::sqrt(2.0 / double(k + nmax)));
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = stddev * normalAt(seed, name, uint64_t(i));
  return st::Tensor::f32(std::move(shape), v);
}

Expected<std::unique_ptr<AttentionIO>> loadAttentionIO(const std::string &inputsPath,
                                                       const std::string &weightsPath,
                                                       const std::string &gradPath,
                                                       const AttentionSignature &sig, uint64_t seed,
                                                       const WarningHandler &warn) {
  auto io = std::make_unique<AttentionIO>();
  std::string err;
  if (!st::read(inputsPath, io->in, err))
    return makeError(err);
  for (const char *name : {"q", "k", "v"})
    if (!find(io->in, name) && !(sig.sharedQk && std::string(name) == "k"))
      return makeError(inputsPath + ": missing tensor '" + name + "'" +
                       (std::string(name) == "q" || std::string(name) == "v"
                            ? ""
                            : " (or use a shared-QK variant)"));
  const st::Tensor &q = *find(io->in, "q");
  if (q.shape.size() != 4 || q.dtype != st::DType::F32)
    return makeError(inputsPath + ": tensor 'q' is " + st::dtypeName(q.dtype) + " " + q.shapeStr() +
                     "; expected F32 [B, H, N, Dh]");
  int64_t B = q.shape[0], H = q.shape[1], N = q.shape[2], D = q.shape[3];
  if (B < 1 || H < 1 || N < 1 || D < 1)
    return makeError(inputsPath + ": tensor 'q' " + q.shapeStr() + " has an empty dimension");
  for (const char *name : {"k", "v"})
    if (const st::Tensor *t = find(io->in, name))
      if (Status s = expectTensor(inputsPath, name, *t, st::DType::F32, {B, H, N, D}, "(like q)");
          !s)
        return s.takeError();
  io->B = B, io->H = H, io->N = N, io->D = D;
  AttentionInputs &in = io->inputs;
  in.q = &q, in.k = find(io->in, "k"), in.v = find(io->in, "v");
  if (sig.sharedQk) {
    if (in.k)
      warn("'" + sig.name +
           "' shares QK (its keys are the normalised queries); the 'k' input is ignored");
    in.k = &q;
  }
  if (const st::Tensor *lengths = find(io->in, "lengths")) {
    if (Status s = expectTensor(inputsPath, "lengths", *lengths, st::DType::I32, {B}, ""); !s)
      return s.takeError();
    const int32_t *len = reinterpret_cast<const int32_t *>(lengths->data.data());
    for (int64_t b = 0; b < B; ++b)
      if (len[b] < 0 || len[b] > N)
        return makeError(inputsPath + ": lengths[" + std::to_string(b) + "] = " +
                         std::to_string(len[b]) + " is outside [0, " + std::to_string(N) + "]");
    if (sig.keyPadding)
      in.lengths = lengths;
    else
      warn("'" + sig.name + "' has no 'mask padding'; the 'lengths' input is ignored");
  }
  if (!weightsPath.empty() && !st::read(weightsPath, io->weights, err))
    return makeError(err);
  if (!gradPath.empty()) {
    if (!st::read(gradPath, io->grad, err))
      return makeError(err);
    const st::Tensor *dout = find(io->grad, "dout");
    if (!dout)
      return makeError(gradPath + ": missing tensor 'dout'");
    if (Status s = expectTensor(gradPath, "dout", *dout, st::DType::F32, {B, H, N, D}, "(like q)");
        !s)
      return s.takeError();
    in.dout = dout;
  }

  // Weights: from the file, or drawn from the seed.
  if (sig.lowrank) {
    bool perHead = sig.share == "none";
    bool shared = sig.share == "kv" || sig.share == "layerwise";
    const st::Tensor *E = find(io->weights, "E");
    int64_t kRows = sig.k ? sig.k : E ? E->shape[E->shape.size() - 2] : std::min<int64_t>(256, N);
    std::vector<int64_t> want =
        perHead ? std::vector<int64_t>{H, kRows, -1} : std::vector<int64_t>{kRows, -1};
    std::string what = perHead ? "([H, k, Nmax] with share = none)" : "([k, Nmax])";
    if (E)
      if (Status s = expectTensor(weightsPath, "E", *E, st::DType::F32, want, what); !s)
        return s.takeError();
    int64_t nmax = E ? E->shape.back() : N;
    if (nmax < N)
      return makeError(weightsPath + ": tensor 'E' covers " + std::to_string(nmax) +
                       " positions; the inputs have N = " + std::to_string(N));
    want.back() = nmax;
    if (!E) {
      io->eStore = randomProjection(seed, "E",
                                    perHead ? std::vector<int64_t>{H, kRows, nmax}
                                            : std::vector<int64_t>{kRows, nmax});
      E = &io->eStore;
      io->projectionsDrawn = true;
    }
    const st::Tensor *F = find(io->weights, "F");
    if (shared && F)
      return makeError(weightsPath + ": tensor 'F' given, but share = " + sig.share +
                       " uses E for both keys and values");
    if (!shared) {
      if (F)
        if (Status s = expectTensor(weightsPath, "F", *F, st::DType::F32, want, "(like E)"); !s)
          return s.takeError();
      if (!F) {
        io->fStore = randomProjection(seed, "F", E->shape);
        F = &io->fStore;
      }
    }
    in.E = E, in.F = shared ? nullptr : F;
    io->kRows = kRows, io->nmax = nmax;
  }
  if (sig.lshRounds > 0) {
    std::vector<int64_t> shape = {sig.lshRounds, D, sig.lshBuckets / 2};
    if (const st::Tensor *given = find(io->weights, "lsh_rotations")) {
      if (Status s = expectTensor(weightsPath, "lsh_rotations", *given, st::DType::F32, shape,
                                  "([rounds, Dh, buckets/2])");
          !s)
        return s.takeError();
      in.rotations = given;
    } else {
      std::vector<float> r(size_t(shape[0] * shape[1] * shape[2]));
      philox::lshRotations(sig.lshSeed, /*stream=*/0, r);
      io->rotationStore = st::Tensor::f32(shape, r);
      io->rotationsDrawn = true;
      in.rotations = &io->rotationStore;
    }
  }
  if (!sig.params.empty()) {
    std::vector<float> values;
    for (const ParamDecl &p : sig.params) {
      if (const st::Tensor *given = find(io->weights, p.name)) {
        if (Status s = expectTensor(weightsPath, p.name, *given, st::DType::F32, {H},
                                    "(one value per head)");
            !s)
          return s.takeError();
        std::vector<float> g = given->asF32();
        values.insert(values.end(), g.begin(), g.end());
        continue;
      }
      for (int64_t h = 0; h < H; ++h)
        values.push_back(p.alibi ? float(std::exp2(-8.0 * double(h + 1) / double(H))) : p.value);
    }
    io->paramStore = st::Tensor::f32({int64_t(sig.params.size()), H}, values);
    in.params = &io->paramStore;
  }
  return io;
}

Status writeAttentionOutputs(const std::string &path, AttentionOutputs outputs,
                             const AttentionIO &io, const AttentionSignature &sig) {
  st::File out;
  out.metadata["generator"] = "attnc run";
  out.metadata["variant"] = sig.name;
  out.tensors["out"] = std::move(outputs.out);
  out.tensors["lse"] = std::move(outputs.lse);
  if (outputs.dq) {
    out.tensors["dq"] = std::move(*outputs.dq);
    if (!sig.sharedQk && outputs.dk)
      out.tensors["dk"] = std::move(*outputs.dk);
    out.tensors["dv"] = std::move(*outputs.dv);
    if (outputs.dE)
      out.tensors["dE"] = std::move(*outputs.dE);
    if (outputs.dF)
      out.tensors["dF"] = std::move(*outputs.dF);
    if (outputs.dparams) {
      std::vector<float> all = outputs.dparams->asF32();
      for (size_t p = 0; p < sig.params.size(); ++p)
        if (sig.params[p].learned)
          out.tensors["d" + sig.params[p].name] = st::Tensor::f32(
              {io.H}, std::vector<float>(all.begin() + p * io.H, all.begin() + (p + 1) * io.H));
    }
  }
  if (io.projectionsDrawn) {
    out.tensors["E"] = io.eStore;
    if (!io.fStore.shape.empty())
      out.tensors["F"] = io.fStore;
  }
  if (io.rotationsDrawn) {
    out.tensors["lsh_rotations"] = io.rotationStore;
    out.metadata["lsh_seed"] = std::to_string(sig.lshSeed);
  }
  std::string err;
  if (!st::write(path, out, err))
    return makeError(err);
  return {};
}

} // namespace attnc
