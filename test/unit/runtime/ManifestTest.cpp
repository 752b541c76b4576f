//===- ManifestTest.cpp - The artifact manifest's one schema --------------===//
//
// writeManifest and parseManifest (runtime/Manifest.h) are the only writer and
// reader of manifest.json: what one writes the other reads back field for
// field, doubles keep every bit, and a damaged field is an error naming it.
//
//===----------------------------------------------------------------------===//
#include "runtime/Manifest.h"

#include <gtest/gtest.h>

using namespace attnc;

namespace {

Manifest sample() {
  Manifest m;
  m.target = "cuda", m.arch = "sm_90", m.source = "kernels.cu", m.specHash = "abc";
  ManifestKernel k;
  k.name = "lsh0_f16_d64", k.dtype = "f16", k.headDim = 64;
  k.blockQ = 64, k.blockKv = 32, k.warps = 4, k.stages = 2;
  k.causal = true, k.deterministic = true, k.numParams = 1;
  k.kvSource = "lsh", k.scale = 0.125, k.smemBytes = 0;
  k.entryPoints = {"attnc_lsh_hash_lsh0", "attnc_lsh_fwd_lsh0"};
  k.function = "m_attention", k.sharedQk = true, k.selfScore = -1e5, k.dropout = 0.2;
  k.lsh = ManifestKernel::Lsh{16, 4, 32, 1, 0, 5};
  k.params = {{"slope", true, 0.3, false}};
  m.kernels.push_back(k);
  k.backward = true, k.name = "lsh0_bwd";
  m.kernels.push_back(k);
  ManifestModel model;
  model.name = "m", model.stepSource = "model_m_host.cpp", model.stepSymbol = "attnc_cuda_step_m";
  model.attentionFunction = "m_attention", model.stepKernels = "model_m.cu", model.stepAbi = 2;
  model.batch = 8, model.arenaBytes = 4096, model.keptBytes = 1024;
  model.args = {"tokens", "targets", "tok_emb"}, model.gradArgs = {2};
  model.configJson = R"({"vocab": 256, "lr_scale": 0.1})";
  m.models.push_back(model);
  return m;
}

TEST(Manifest, RoundTripsEveryField) {
  const Manifest m = sample();
  const std::string text = writeManifest(m);
  Expected<Manifest> back = parseManifest(text, "manifest.json");
  ASSERT_TRUE(back.ok()) << back.error() << "\n" << text;
  EXPECT_EQ(back->formatVersion, kManifestFormatVersion);
  EXPECT_EQ(back->target, "cuda");
  EXPECT_EQ(back->arch, "sm_90");
  EXPECT_EQ(back->specHash, "abc");
  ASSERT_EQ(back->kernels.size(), 2u);
  const ManifestKernel &a = m.kernels[0], &b = back->kernels[0];
  EXPECT_EQ(b.name, a.name);
  EXPECT_FALSE(b.backward);
  EXPECT_TRUE(back->kernels[1].backward);
  EXPECT_EQ(b.dtype, a.dtype);
  EXPECT_EQ(b.headDim, a.headDim);
  EXPECT_EQ(b.blockQ, a.blockQ);
  EXPECT_EQ(b.blockKv, a.blockKv);
  EXPECT_EQ(b.warps, a.warps);
  EXPECT_EQ(b.stages, a.stages);
  EXPECT_EQ(b.causal, a.causal);
  EXPECT_EQ(b.deterministic, a.deterministic);
  EXPECT_EQ(b.kvSource, a.kvSource);
  EXPECT_EQ(b.scale, a.scale);
  EXPECT_EQ(b.entryPoints, a.entryPoints);
  EXPECT_EQ(b.function, a.function);
  EXPECT_EQ(b.sharedQk, a.sharedQk);
  ASSERT_TRUE(b.selfScore.has_value());
  EXPECT_EQ(*b.selfScore, *a.selfScore);
  EXPECT_EQ(b.dropout, a.dropout); // bit for bit
  ASSERT_TRUE(b.lsh.has_value());
  EXPECT_EQ(b.lsh->numBuckets, 16);
  EXPECT_EQ(b.lsh->rounds, 4);
  EXPECT_EQ(b.lsh->chunk, 32);
  EXPECT_EQ(b.lsh->before, 1);
  EXPECT_EQ(b.lsh->seed, 5);
  ASSERT_EQ(b.params.size(), 1u);
  EXPECT_EQ(b.params[0].name, "slope");
  EXPECT_TRUE(b.params[0].alibi);
  EXPECT_EQ(b.params[0].value, 0.3);
  EXPECT_FALSE(b.params[0].learned);
  ASSERT_EQ(back->models.size(), 1u);
  const ManifestModel &mm = back->models[0];
  EXPECT_EQ(mm.stepKernels, "model_m.cu");
  EXPECT_EQ(mm.stepAbi, 2);
  EXPECT_EQ(mm.batch, 8);
  EXPECT_EQ(mm.arenaBytes, 4096);
  EXPECT_EQ(mm.args, m.models[0].args);
  EXPECT_EQ(mm.gradArgs, m.models[0].gradArgs);
  // Written again, the same text: one writer, one reader, nothing lost.
  EXPECT_EQ(writeManifest(*back), text);
}

TEST(Manifest, TheInferenceFunctionRoundTripsAndMayBeAbsent) {
  Manifest m = sample();
  // Artifacts from before the inference function have none: it stays empty.
  Expected<Manifest> older = parseManifest(writeManifest(m), "manifest.json");
  ASSERT_TRUE(older.ok()) << older.error();
  EXPECT_TRUE(older->models[0].inferSymbol.empty());
  EXPECT_EQ(writeManifest(m).find("\"inference\""), std::string::npos);
  ManifestModel &mm = m.models[0];
  mm.inferSource = "model_m.cpp", mm.inferSymbol = "attnc_infer_m";
  mm.inferArenaBytes = 65536, mm.inferBatch = 1, mm.inferArgs = {"tokens", "tok_emb"};
  const std::string text = writeManifest(m);
  Expected<Manifest> back = parseManifest(text, "manifest.json");
  ASSERT_TRUE(back.ok()) << back.error() << "\n" << text;
  const ManifestModel &b = back->models[0];
  EXPECT_EQ(b.inferSource, "model_m.cpp");
  EXPECT_EQ(b.inferSymbol, "attnc_infer_m");
  EXPECT_EQ(b.inferArenaBytes, 65536);
  EXPECT_EQ(b.inferBatch, 1);
  EXPECT_EQ(b.inferArgs, mm.inferArgs);
  EXPECT_EQ(writeManifest(*back), text);
  // A broken entry is an error naming the field.
  std::string bad = text;
  const std::string batch = "\"batch\": 1,";
  bad.replace(bad.find(batch), batch.size(), "\"batch\": 0,");
  Expected<Manifest> zero = parseManifest(bad, "manifest.json");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().find("models[0].inference: batch must be positive"), std::string::npos)
      << zero.error();
  bad = text;
  const std::string symbol = "\"symbol\": \"attnc_infer_m\"";
  bad.replace(bad.find(symbol), symbol.size(), "\"symbol\": 7");
  Expected<Manifest> typed = parseManifest(bad, "manifest.json");
  ASSERT_FALSE(typed.ok());
  EXPECT_NE(typed.error().find("models[0].inference.symbol"), std::string::npos) << typed.error();
}

TEST(Manifest, HostKernelsRoundTripAndMayBeAbsent) {
  Manifest m = sample();
  // A CPU artifact (or one from before host kernels) has none.
  EXPECT_EQ(writeManifest(m).find("\"host_kernels\""), std::string::npos);
  Expected<Manifest> none = parseManifest(writeManifest(m), "manifest.json");
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_TRUE(none->hostKernels.empty());
  EXPECT_TRUE(none->hostSource.empty());
  // A CUDA artifact's CPU kernels of the same functions (cuda-sim).
  m.hostSource = "kernels.cpp";
  ManifestKernel k = m.kernels[0];
  k.dtype = "f32", k.blockQ = 16, k.blockKv = 48, k.warps = 1, k.stages = 1;
  m.hostKernels = {k};
  k.backward = true;
  m.hostKernels.push_back(k);
  const std::string text = writeManifest(m);
  Expected<Manifest> back = parseManifest(text, "manifest.json");
  ASSERT_TRUE(back.ok()) << back.error() << "\n" << text;
  EXPECT_EQ(back->hostSource, "kernels.cpp");
  ASSERT_EQ(back->hostKernels.size(), 2u);
  EXPECT_EQ(back->hostKernels[0].dtype, "f32");
  EXPECT_EQ(back->hostKernels[0].blockKv, 48);
  EXPECT_FALSE(back->hostKernels[0].backward);
  EXPECT_TRUE(back->hostKernels[1].backward);
  EXPECT_EQ(back->hostKernels[1].function, "m_attention");
  EXPECT_EQ(back->kernels.size(), 2u); // the CUDA kernels untouched
  EXPECT_EQ(back->kernels[0].dtype, "f16");
  EXPECT_EQ(writeManifest(*back), text);
  // Damaged entries name the field under host_kernels.
  std::string bad = text;
  const std::string source = "\"source\": \"kernels.cpp\"";
  bad.replace(bad.find(source), source.size(), "\"source\": \"../kernels.cpp\"");
  Expected<Manifest> escaped = parseManifest(bad, "manifest.json");
  ASSERT_FALSE(escaped.ok());
  EXPECT_NE(escaped.error().find("host_kernels.source: expected a file name in the artifact"),
            std::string::npos)
      << escaped.error();
  bad = text;
  const std::string blockKv = "\"block_kv\": 48";
  bad.replace(bad.find(blockKv), blockKv.size(), "\"block_kv\": \"wide\"");
  Expected<Manifest> typed = parseManifest(bad, "manifest.json");
  ASSERT_FALSE(typed.ok());
  EXPECT_NE(typed.error().find("host_kernels.kernels[0].tile.block_kv: expected an integer"),
            std::string::npos)
      << typed.error();
}

TEST(Manifest, TheTrainBlockRoundTripsAndMayBeAbsent) {
  Manifest m = sample();
  // A model without a train block (or an older artifact): "{}", not written.
  EXPECT_EQ(writeManifest(m).find("\"train\""), std::string::npos);
  Expected<Manifest> none = parseManifest(writeManifest(m), "manifest.json");
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_EQ(none->models[0].trainJson, "{}");
  m.models[0].trainJson = R"({"lr":0.002,"warmup":30})";
  const std::string text = writeManifest(m);
  Expected<Manifest> back = parseManifest(text, "manifest.json");
  ASSERT_TRUE(back.ok()) << back.error() << "\n" << text;
  EXPECT_EQ(back->models[0].trainJson, m.models[0].trainJson);
  EXPECT_EQ(writeManifest(*back), text);
  std::string bad = text;
  const std::string train = "\"train\": {";
  bad.replace(bad.find(train), train.size(), "\"train\": 7, \"x\": {");
  Expected<Manifest> typed = parseManifest(bad, "manifest.json");
  ASSERT_FALSE(typed.ok());
  EXPECT_NE(typed.error().find("models[0].train: expected an object"), std::string::npos)
      << typed.error();
}

TEST(Manifest, DoublesKeepEveryBitAndKeysAreSorted) {
  const std::string text = writeManifest(sample());
  EXPECT_NE(text.find("\"dropout\": 0.20000000000000001"), std::string::npos) << text;
  EXPECT_NE(text.find("\"self_score\": -100000"), std::string::npos) << text;
  EXPECT_NE(text.find("\"after\": 0,\n"), std::string::npos) << text;
  EXPECT_LT(text.find("\"arch\""), text.find("\"format_version\""));
  EXPECT_LT(text.find("\"format_version\""), text.find("\"kernels\""));
}

TEST(Manifest, TheLaunchDescriptionComesFromTheEntry) {
  const Manifest m = sample();
  const ManifestKernel &k = m.kernels[0];
  KernelDesc d = k.desc();
  EXPECT_EQ(d.name, k.name);
  EXPECT_EQ(d.blockQ, 64);
  EXPECT_EQ(d.warps, 4);
  EXPECT_FALSE(d.lowrank);
  ASSERT_TRUE(d.lsh.has_value());
  EXPECT_EQ(d.lsh->rounds, 4);
  EXPECT_EQ(d.scale, 0.125f);
  EXPECT_EQ(d.dropout, 0.2f);
  EXPECT_EQ(d.entryPoints, k.entryPoints);
}

TEST(Manifest, DamagedFieldsAreErrorsNamingThem) {
  std::string text = writeManifest(sample());
  std::string bad = text;
  bad.replace(bad.find("\"block_q\": 64"), 13, "\"block_q\": \"big\"");
  Expected<Manifest> m = parseManifest(bad, "art/manifest.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("art/manifest.json: kernels[0].tile.block_q: expected an integer"),
            std::string::npos)
      << m.error();
  bad = text;
  bad.replace(bad.find("\"format_version\": 1"), 19, "\"format_version\": 9");
  m = parseManifest(bad, "manifest.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("format_version 9"), std::string::npos) << m.error();
  m = parseManifest("{", "manifest.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("not a JSON object"), std::string::npos) << m.error();
}

} // namespace
