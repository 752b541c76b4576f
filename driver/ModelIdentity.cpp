//===- ModelIdentity.cpp - What makes a trained model the same ------------===//
#include "driver/ModelIdentity.h"

#include "runtime/Sha256.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/Support/raw_ostream.h"

#include <set>
#include <sstream>
#include <vector>

using namespace mlir;

namespace attnc::driver {

ModelIdentity modelIdentity(attn::ModelOp model) {
  MLIRContext *ctx = model.getContext();
  OwningOpRef<ModuleOp> canon = ModuleOp::create(UnknownLoc::get(ctx));
  OpBuilder b(ctx);
  b.setInsertionPointToEnd(canon->getBody());
  const StringAttr attentionName = b.getStringAttr("attention");
  // The variant first, under one name for every model.
  for (attn::LayerOp layer : model.getBody().getOps<attn::LayerOp>()) {
    auto variant =
        SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(model, layer.getAttentionAttr());
    if (!variant)
      continue; // the verifier refuses such a model before any run
    auto v = cast<attn::VariantOp>(b.clone(*variant));
    v.setSymName(attentionName);
    v.setTileAttr(attn::TileAttr::get(ctx, attn::kAuto, attn::kAuto, attn::kAuto, attn::kAuto));
    break; // one layer template per model
  }
  auto m = cast<attn::ModelOp>(b.clone(*model));
  m.setSymName("model");
  m.removeTrainAttr();
  for (attn::LayerOp layer : m.getBody().getOps<attn::LayerOp>()) {
    layer.setAttentionAttr(FlatSymbolRefAttr::get(attentionName));
    if (layer.getFfnChunkAttr()) // printed with the activation: auto for all
      layer.setFfnChunkAttr(b.getI64IntegerAttr(attn::kAuto));
  }
  ModelIdentity id;
  llvm::raw_string_ostream os(id.text);
  canon->print(os, OpPrintingFlags().enableDebugInfo(false));
  os.flush();
  id.hash = Sha256::hexHash("attnc model identity 1\n" + id.text);
  return id;
}

std::string identityDifference(const std::string &was, const std::string &now) {
  auto lines = [](const std::string &text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      const size_t first = line.find_first_not_of(' ');
      if (first != std::string::npos && line.compare(first, 1, "}") != 0 &&
          line.compare(first, 6, "module") != 0)
        out.push_back(line.substr(first));
    }
    return out;
  };
  const std::vector<std::string> a = lines(was), b = lines(now);
  const std::set<std::string> inA(a.begin(), a.end()), inB(b.begin(), b.end());
  std::string out;
  for (const std::string &line : a)
    if (!inB.count(line))
      out += "  run:  " + line + "\n";
  for (const std::string &line : b)
    if (!inA.count(line))
      out += "  spec: " + line + "\n";
  return out;
}

} // namespace attnc::driver
