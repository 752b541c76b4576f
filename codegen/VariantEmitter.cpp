//===- VariantEmitter.cpp - Variant policy structs from IR regions --------===//
#include "codegen/VariantEmitter.h"

#include "dialect/AttnDialect.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace attnc::attn;

namespace attnc::codegen {

void emitVariantHelpers(llvm::raw_ostream &os) {
  os << R"(// Helpers of generated variant policies (NaN-propagating like arith's
// minimumf/maximumf; parameter indices clamped to [0, H)).
ATTNC_HD float attnc_minimumf(float a, float b) { return a != a ? a : b != b ? b : (a < b ? a : b); }
ATTNC_HD float attnc_maximumf(float a, float b) { return a != a ? a : b != b ? b : (a > b ? a : b); }
ATTNC_HD float attnc_absf(float x) { return x < 0.0f ? -x : x; }
ATTNC_HD int attnc_absi(int x) { return x < 0 ? -x : x; }
ATTNC_HD int attnc_clamp_head(int h, int H) { return h < 0 ? 0 : (h >= H ? H - 1 : h); }
)";
}

namespace {

/// Translates one scalar region to C++ statements. With `numTangents` > 0,
/// every float value also gets tangents t[0..n): t[0] w.r.t. the score `s`,
/// t[1 + p] w.r.t. learned parameter p (forward-mode differentiation).
class RegionEmitter {
public:
  RegionEmitter(llvm::raw_ostream &os, ArrayAttr params, unsigned numTangents)
      : os(os), params(params), numTangents(numTangents) {}

  /// Emits the body; `onYield` writes the return statement(s) for the
  /// yielded value.
  LogicalResult emit(Region &region, ArrayRef<StringRef> argNames,
                     llvm::function_ref<void(Value)> onYield) {
    Block &block = region.front();
    for (auto [arg, name] : llvm::zip(block.getArguments(), argNames)) {
      names[arg] = name.str();
      if (numTangents && arg.getType().isF32())
        for (unsigned t = 0; t < numTangents; ++t)
          tangents[arg].push_back(t == 0 ? "1.0f" : "0.0f");
    }
    for (Operation &op : block) {
      if (auto y = llvm::dyn_cast<YieldOp>(op)) {
        onYield(y.getValues()[0]);
        return success();
      }
      if (failed(emitOp(op)))
        return failure();
    }
    return success();
  }

  std::string name(Value v) { return names.lookup(v); }
  std::string tangent(Value v, unsigned t) {
    auto it = tangents.find(v);
    return it == tangents.end() ? "0.0f" : it->second[t];
  }

private:
  std::string fresh() { return "v" + std::to_string(counter++); }

  static const char *cType(Type t) { return t.isF32() ? "float" : t.isInteger(1) ? "bool" : "int"; }

  /// Declares the op's result as `expr`, with tangent expressions `ts`.
  void define(Value result, const std::string &expr, ArrayRef<std::string> ts = {}) {
    std::string n = fresh();
    names[result] = n;
    os << "    const " << cType(result.getType()) << " " << n << " = " << expr << ";\n";
    if (!numTangents || !result.getType().isF32())
      return;
    auto &list = tangents[result];
    for (unsigned t = 0; t < numTangents; ++t) {
      std::string te = t < ts.size() ? ts[t] : "0.0f";
      if (te == "0.0f") {
        list.push_back(te);
        continue;
      }
      std::string tn = n + "_t" + std::to_string(t);
      os << "    const float " << tn << " = " << te << ";\n";
      list.push_back(tn);
    }
  }

  /// Tangents of a binary float op from a per-direction rule.
  SmallVector<std::string>
  tangentsOf(Value a, Value b,
             llvm::function_ref<std::string(const std::string &, const std::string &)> rule) {
    SmallVector<std::string> ts;
    for (unsigned t = 0; t < numTangents; ++t) {
      std::string ta = tangent(a, t), tb = b ? tangent(b, t) : "0.0f";
      ts.push_back(ta == "0.0f" && tb == "0.0f" ? "0.0f" : rule(ta, tb));
    }
    return ts;
  }

  SmallVector<std::string>
  unaryTangents(Value x, llvm::function_ref<std::string(const std::string &)> rule) {
    SmallVector<std::string> ts;
    for (unsigned t = 0; t < numTangents; ++t) {
      std::string tx = tangent(x, t);
      ts.push_back(tx == "0.0f" ? "0.0f" : rule(tx));
    }
    return ts;
  }

  static std::string floatLiteral(double v) {
    std::string s = llvm::formatv("{0:e9}", v).str();
    return "(float)" + s;
  }

  LogicalResult emitOp(Operation &op) {
    auto bin = [&](const char *sym) {
      return "(" + name(op.getOperand(0)) + " " + sym + " " + name(op.getOperand(1)) + ")";
    };
    Value a = op.getNumOperands() > 0 ? op.getOperand(0) : Value();
    Value b = op.getNumOperands() > 1 ? op.getOperand(1) : Value();
    std::string A = a ? name(a) : "", B = b ? name(b) : "";
    return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
        .Case<arith::ConstantOp>([&](arith::ConstantOp c) -> LogicalResult {
          Attribute v = c.getValue();
          if (auto f = llvm::dyn_cast<FloatAttr>(v))
            define(c, floatLiteral(f.getValueAsDouble()));
          else if (auto i = llvm::dyn_cast<IntegerAttr>(v))
            define(c, c.getType().isInteger(1) ? (i.getValue().getBoolValue() ? "true" : "false")
                                               : std::to_string(i.getInt()));
          else
            return c.emitOpError("constant has no C++ lowering");
          return success();
        })
        .Case<arith::AddIOp>([&](auto o) {
          define(o, bin("+"));
          return success();
        })
        .Case<arith::SubIOp>([&](auto o) {
          define(o, bin("-"));
          return success();
        })
        .Case<arith::MulIOp>([&](auto o) {
          define(o, bin("*"));
          return success();
        })
        // Division by zero is already guarded by a select in the IR.
        .Case<arith::DivSIOp>([&](auto o) {
          define(o, bin("/"));
          return success();
        })
        .Case<arith::RemSIOp>([&](auto o) {
          define(o, bin("%"));
          return success();
        })
        .Case<arith::MinSIOp>([&](auto o) {
          define(o, "(" + A + " < " + B + " ? " + A + " : " + B + ")");
          return success();
        })
        .Case<arith::MaxSIOp>([&](auto o) {
          define(o, "(" + A + " > " + B + " ? " + A + " : " + B + ")");
          return success();
        })
        .Case<arith::AndIOp>([&](auto o) {
          define(o, bin("&&"));
          return success();
        })
        .Case<arith::OrIOp>([&](auto o) {
          define(o, bin("||"));
          return success();
        })
        .Case<arith::XOrIOp>([&](auto o) {
          define(o, bin("!="));
          return success();
        })
        .Case<arith::AddFOp>([&](auto o) {
          define(o, bin("+"), tangentsOf(a, b, [](auto &ta, auto &tb) { return ta + " + " + tb; }));
          return success();
        })
        .Case<arith::SubFOp>([&](auto o) {
          define(o, bin("-"),
                 tangentsOf(a, b, [](auto &ta, auto &tb) { return ta + " - (" + tb + ")"; }));
          return success();
        })
        .Case<arith::MulFOp>([&](auto o) {
          define(o, bin("*"), tangentsOf(a, b, [&](auto &ta, auto &tb) {
                   return ta + " * " + B + " + " + A + " * " + tb;
                 }));
          return success();
        })
        .Case<arith::DivFOp>([&](auto o) {
          define(o, bin("/"), tangentsOf(a, b, [&](auto &ta, auto &tb) {
                   return "(" + ta + " * " + B + " - " + A + " * " + tb + ") / (" + B + " * " + B +
                          ")";
                 }));
          return success();
        })
        .Case<arith::NegFOp>([&](auto o) {
          define(o, "(-" + A + ")", unaryTangents(a, [](auto &t) { return "-(" + t + ")"; }));
          return success();
        })
        .Case<arith::MinimumFOp, arith::MaximumFOp>([&](Operation *o) {
          bool isMin = llvm::isa<arith::MinimumFOp>(o);
          std::string cmp = "(" + A + (isMin ? " <= " : " >= ") + B + ")";
          define(o->getResult(0),
                 std::string(isMin ? "attnc_minimumf(" : "attnc_maximumf(") + A + ", " + B + ")",
                 tangentsOf(a, b, [&](auto &ta, auto &tb) {
                   return "(" + cmp + " ? " + ta + " : " + tb + ")";
                 }));
          return success();
        })
        .Case<arith::CmpIOp>([&](arith::CmpIOp o) {
          static const char *syms[] = {"==", "!=", "<", "<=", ">", ">=", "<", "<=", ">", ">="};
          define(o, bin(syms[static_cast<int>(o.getPredicate())]));
          return success();
        })
        .Case<arith::CmpFOp>([&](arith::CmpFOp o) -> LogicalResult {
          const char *sym = nullptr;
          switch (o.getPredicate()) {
          case arith::CmpFPredicate::OEQ:
            sym = "==";
            break;
          case arith::CmpFPredicate::UNE:
            sym = "!=";
            break;
          case arith::CmpFPredicate::OLT:
            sym = "<";
            break;
          case arith::CmpFPredicate::OLE:
            sym = "<=";
            break;
          case arith::CmpFPredicate::OGT:
            sym = ">";
            break;
          case arith::CmpFPredicate::OGE:
            sym = ">=";
            break;
          default:
            return o.emitOpError("comparison predicate has no C++ lowering");
          }
          define(o, bin(sym));
          return success();
        })
        .Case<arith::SelectOp>([&](arith::SelectOp o) {
          std::string c = name(o.getCondition()), t = name(o.getTrueValue()),
                      f = name(o.getFalseValue());
          define(o, "(" + c + " ? " + t + " : " + f + ")",
                 tangentsOf(o.getTrueValue(), o.getFalseValue(), [&](auto &ta, auto &tb) {
                   return "(" + c + " ? " + ta + " : " + tb + ")";
                 }));
          return success();
        })
        .Case<arith::IndexCastOp>([&](auto o) {
          define(o, A);
          return success();
        })
        .Case<arith::SIToFPOp>([&](auto o) {
          define(o, "(float)" + A);
          return success();
        })
        .Case<math::AbsIOp>([&](auto o) {
          define(o, "attnc_absi(" + A + ")");
          return success();
        })
        .Case<math::AbsFOp>([&](auto o) {
          define(o, "attnc_absf(" + A + ")", unaryTangents(a, [&](auto &t) {
                   return "(" + A + " < 0.0f ? -(" + t + ") : " + t + ")";
                 }));
          return success();
        })
        .Case<math::ExpOp>([&](auto o) {
          std::string n = "v" + std::to_string(counter); // the name define() will use
          define(o, "expf(" + A + ")", unaryTangents(a, [&](auto &t) { return n + " * " + t; }));
          return success();
        })
        .Case<math::LogOp>([&](auto o) {
          define(o, "logf(" + A + ")", unaryTangents(a, [&](auto &t) { return t + " / " + A; }));
          return success();
        })
        .Case<math::SqrtOp>([&](auto o) {
          std::string n = "v" + std::to_string(counter);
          define(o, "sqrtf(" + A + ")",
                 unaryTangents(a, [&](auto &t) { return "0.5f * " + t + " / " + n; }));
          return success();
        })
        .Case<math::TanhOp>([&](auto o) {
          std::string n = "v" + std::to_string(counter);
          define(o, "tanhf(" + A + ")", unaryTangents(a, [&](auto &t) {
                   return "(1.0f - " + n + " * " + n + ") * " + t;
                 }));
          return success();
        })
        .Case<HeadParamOp>([&](HeadParamOp o) {
          int index = paramIndex(params, o.getName());
          auto decl = llvm::cast<HeadParamAttr>(params[index]);
          SmallVector<std::string> ts(numTangents, "0.0f");
          if (numTangents && decl.getLearned())
            ts[1 + index] = "1.0f";
          define(o,
                 "params[" + std::to_string(index) + " * H + attnc_clamp_head(" +
                     name(o.getHead()) + ", H)]",
                 ts);
          return success();
        })
        .Default([](Operation *o) {
          return o->emitOpError("has no C++ lowering in a score or mask region");
        });
  }

  llvm::raw_ostream &os;
  ArrayAttr params;
  unsigned numTangents;
  unsigned counter = 0;
  llvm::DenseMap<Value, std::string> names;
  llvm::DenseMap<Value, SmallVector<std::string>> tangents;
};

} // namespace

LogicalResult emitVariantStruct(Operation *fusedOp, StringRef structName, llvm::raw_ostream &os) {
  ArrayAttr params = getParamDecls(fusedOp);
  unsigned numParams = params ? params.size() : 0;
  Region &score = fusedOp->getRegion(0), &mask = fusedOp->getRegion(1);
  bool causal = fusedOp->hasAttr("causal");
  // Low-rank padding zeroes keys before the projection; the projected keys
  // the kernel sees are all valid.
  auto source = fusedOp->getAttrOfType<KvSourceAttr>("kv_source");
  bool padding =
      fusedOp->hasAttr("key_padding") && !(source && source.getValue() == KvSource::lowrank);
  // Shared-QK dense attention (LSH's dense fallback): the self score
  // replaces the modified score, so its derivatives are 0.
  auto self = fusedOp->getAttrOfType<FloatAttr>("self_score");
  std::string selfScore;
  if (self) {
    llvm::raw_string_ostream ss(selfScore);
    ss << llvm::format("%.9e", self.getValueAsDouble()) << "f";
  }
  os << "struct " << structName << " {\n"
     << "  static constexpr bool kCausal = " << (causal ? "true" : "false") << ";\n"
     << "  static constexpr bool kKeyPadding = " << (padding ? "true" : "false") << ";\n"
     << "  static constexpr bool kHasScoreMod = " << (score.empty() && !self ? "false" : "true")
     << ";\n"
     << "  static constexpr bool kHasMask = " << (mask.empty() ? "false" : "true") << ";\n"
     << "  static constexpr int kNumParams = " << numParams << ";\n";
  // The key band attn-key-band proved: the kernels skip blocks outside it.
  auto band = [&](StringRef attr, StringRef name, StringRef what) {
    auto v = fusedOp->getAttrOfType<IntegerAttr>(attr);
    os << "  static constexpr bool kHas" << name << " = " << (v ? "true" : "false") << ";\n"
       << "  static constexpr int k" << name << " = " << (v ? v.getInt() : 0) << "; // " << what
       << "\n";
  };
  auto dropout = fusedOp->getAttrOfType<FloatAttr>("dropout");
  os << "  static constexpr bool kDropout = "
     << (dropout && dropout.getValueAsDouble() > 0 ? "true" : "false")
     << "; // attention dropout while training (AttnFwdArgs::dropout)\n";
  band("max_back", "MaxBack", "keys with q - kv > it are masked");
  band("max_ahead", "MaxAhead", "keys with kv - q > it are masked");
  os << "\n";

  static const StringRef scoreArgs[] = {"s", "b", "h", "q", "kv"};
  // score()
  os << "  ATTNC_HD static float score(float s, int b, int h, int q, int kv, "
        "const float *params, int H) {\n"
     << "    (void)b; (void)h; (void)q; (void)kv; (void)params; (void)H;\n";
  if (self)
    os << "    if (q == kv)\n      return " << selfScore << "; // self score\n";
  if (score.empty()) {
    os << "    return s;\n";
  } else {
    RegionEmitter e(os, params, 0);
    if (failed(
            e.emit(score, scoreArgs, [&](Value v) { os << "    return " << e.name(v) << ";\n"; })))
      return failure();
  }
  os << "  }\n\n";
  // score_grad()
  os << "  ATTNC_HD static float score_grad(float s, int b, int h, int q, int kv, "
        "const float *params, int H, float *dparams) {\n"
     << "    (void)s; (void)b; (void)h; (void)q; (void)kv; (void)params; (void)H; "
        "(void)dparams;\n";
  if (self) {
    os << "    if (q == kv) {\n";
    for (unsigned p = 0; p < numParams; ++p)
      os << "      dparams[" << p << "] = 0.0f;\n";
    os << "      return 0.0f;\n    }\n";
  }
  if (score.empty()) {
    os << "    return 1.0f;\n";
  } else {
    RegionEmitter e(os, params, 1 + numParams);
    if (failed(e.emit(score, scoreArgs, [&](Value v) {
          for (unsigned p = 0; p < numParams; ++p)
            os << "    dparams[" << p << "] = " << e.tangent(v, 1 + p) << ";\n";
          os << "    return " << e.tangent(v, 0) << ";\n";
        })))
      return failure();
  }
  os << "  }\n\n";
  // keep()
  os << "  ATTNC_HD static bool keep(int b, int h, int q, int kv, const float *params, int H) {\n"
     << "    (void)b; (void)h; (void)q; (void)kv; (void)params; (void)H;\n";
  if (mask.empty()) {
    os << "    return true;\n";
  } else {
    RegionEmitter e(os, params, 0);
    if (failed(e.emit(mask, ArrayRef<StringRef>(scoreArgs).drop_front(),
                      [&](Value v) { os << "    return " << e.name(v) << ";\n"; })))
      return failure();
  }
  os << "  }\n};\n";
  return success();
}

} // namespace attnc::codegen
