//===- KeyBand.cpp - Key bands from mask regions, for block skipping ------===//
//
// A sliding-window mask written as an expression (`mask q - kv < 256`) is
// opaque to the kernels: they would compute every key block and mask it
// element by element. This pass proves bounds on q - kv from the mask
// region and records them (`max_back`, `max_ahead`); the kernels start and
// stop their key loops at the band. Sound by construction: only conjuncts
// of the yielded value are used, and only signed comparisons of expressions
// whose difference is exactly ±(q - kv) + c.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"

#include <optional>

namespace attnc {
#define GEN_PASS_DEF_KEYBAND
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc::attn;

namespace {

/// a·q + b·kv + c over the mask's index arguments.
struct Linear {
  int64_t q = 0, kv = 0, c = 0;
};

/// Bounds on d = q - kv proven so far.
struct Band {
  std::optional<int64_t> maxD, minD; ///< d <= maxD, d >= minD
  void upper(int64_t v) { maxD = maxD ? std::min(*maxD, v) : v; }
  void lower(int64_t v) { minD = minD ? std::max(*minD, v) : v; }
};

// Constants far beyond any sequence length are not bounds the kernels'
// 32-bit indices can use; ignoring them is always sound.
constexpr int64_t kLimit = int64_t(1) << 30;

class BandProver {
public:
  BandProver(Value q, Value kv) : q_(q), kv_(kv) {}

  /// Adds the bounds of every conjunct of `cond`.
  void conjuncts(Value cond, Band &band) {
    if (auto a = cond.getDefiningOp<arith::AndIOp>()) {
      conjuncts(a.getLhs(), band);
      conjuncts(a.getRhs(), band);
      return;
    }
    auto cmp = cond.getDefiningOp<arith::CmpIOp>();
    if (!cmp)
      return;
    std::optional<Linear> l = linear(cmp.getLhs()), r = linear(cmp.getRhs());
    if (!l || !r)
      return;
    // lhs - rhs = sign·(q - kv) + c
    Linear diff{l->q - r->q, l->kv - r->kv, l->c - r->c};
    if (diff.q != -diff.kv || (diff.q != 1 && diff.q != -1) || std::abs(diff.c) > kLimit)
      return;
    // Normalise to a comparison of d = q - kv against a constant: with
    // sign = -1, -d + c PRED 0 is d PRED' c with the predicate swapped.
    int64_t sign = diff.q, c = diff.c;
    arith::CmpIPredicate p = cmp.getPredicate();
    if (sign == -1)
      p = swapped(p);
    int64_t k = sign == 1 ? -c : c; // d PRED k
    switch (p) {
    case arith::CmpIPredicate::slt:
      band.upper(k - 1);
      break;
    case arith::CmpIPredicate::sle:
      band.upper(k);
      break;
    case arith::CmpIPredicate::sgt:
      band.lower(k + 1);
      break;
    case arith::CmpIPredicate::sge:
      band.lower(k);
      break;
    case arith::CmpIPredicate::eq:
      band.upper(k), band.lower(k);
      break;
    default:
      break; // ne and the unsigned predicates bound nothing here
    }
  }

private:
  /// c PRED d is d swapped(PRED) c.
  static arith::CmpIPredicate swapped(arith::CmpIPredicate p) {
    switch (p) {
    case arith::CmpIPredicate::slt:
      return arith::CmpIPredicate::sgt;
    case arith::CmpIPredicate::sle:
      return arith::CmpIPredicate::sge;
    case arith::CmpIPredicate::sgt:
      return arith::CmpIPredicate::slt;
    case arith::CmpIPredicate::sge:
      return arith::CmpIPredicate::sle;
    default:
      return p; // eq, ne: symmetric; unsigned ones are ignored later
    }
  }

  std::optional<Linear> linear(Value v, int depth = 0) {
    if (depth > 32)
      return std::nullopt;
    if (v == q_)
      return Linear{1, 0, 0};
    if (v == kv_)
      return Linear{0, 1, 0};
    Operation *op = v.getDefiningOp();
    if (!op)
      return std::nullopt;
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      auto i = dyn_cast<IntegerAttr>(c.getValue());
      if (!i || std::abs(i.getValue().getSExtValue()) > kLimit)
        return std::nullopt;
      return Linear{0, 0, i.getValue().getSExtValue()};
    }
    if (auto cast = dyn_cast<arith::IndexCastOp>(op)) {
      // index -> i64 and back preserve every index the kernels use; a
      // narrower integer could wrap, so no bound through it.
      if (!cast.getType().isIndex() && cast.getType().getIntOrFloatBitWidth() < 64)
        return std::nullopt;
      return linear(cast.getIn(), depth + 1);
    }
    if (isa<arith::AddIOp, arith::SubIOp, arith::MulIOp>(op)) {
      std::optional<Linear> a = linear(op->getOperand(0), depth + 1),
                            b = linear(op->getOperand(1), depth + 1);
      if (!a || !b)
        return std::nullopt;
      if (isa<arith::AddIOp>(op))
        return Linear{a->q + b->q, a->kv + b->kv, a->c + b->c};
      if (isa<arith::SubIOp>(op))
        return Linear{a->q - b->q, a->kv - b->kv, a->c - b->c};
      // A product is linear only with a constant side.
      const Linear &x = (b->q == 0 && b->kv == 0) ? *a : *b;
      const Linear &k = (b->q == 0 && b->kv == 0) ? *b : *a;
      if (k.q != 0 || k.kv != 0 || std::abs(k.c) > kLimit || std::abs(x.q) > kLimit ||
          std::abs(x.kv) > kLimit || std::abs(x.c) > kLimit)
        return std::nullopt;
      return Linear{x.q * k.c, x.kv * k.c, x.c * k.c};
    }
    return std::nullopt;
  }

  Value q_, kv_;
};

struct KeyBandPass : public attnc::impl::KeyBandBase<KeyBandPass> {
  using KeyBandBase::KeyBandBase;

  void runOnOperation() override {
    getOperation().walk([&](Operation *op) {
      if (auto f = dyn_cast<FusedAttentionOp>(op))
        annotate(f, f.getKvSource(), f.getMask());
      else if (auto g = dyn_cast<FusedAttentionGradOp>(op))
        annotate(g, g.getKvSource(), g.getMask());
    });
  }

  template <typename OpT> void annotate(OpT op, KvSource source, Region &mask) {
    if (source != KvSource::direct || mask.empty())
      return;
    Block &body = mask.front();
    auto yield = dyn_cast<YieldOp>(body.getTerminator());
    if (!yield || yield->getNumOperands() != 1 || body.getNumArguments() != 4)
      return;
    BandProver prover(body.getArgument(2), body.getArgument(3));
    Band band;
    prover.conjuncts(yield->getOperand(0), band);
    Builder b(op.getContext());
    // max_back: d <= maxD. max_ahead: kv - q <= -minD.
    if (band.maxD)
      op.setMaxBackAttr(b.getI64IntegerAttr(*band.maxD));
    if (band.minD)
      op.setMaxAheadAttr(b.getI64IntegerAttr(-*band.minD));
    if (report) {
      if (band.maxD || band.minD) {
        auto diag = op.emitRemark("keys kept only where");
        if (band.maxD)
          diag << " q - kv <= " << *band.maxD;
        if (band.maxD && band.minD)
          diag << " and";
        if (band.minD)
          diag << " kv - q <= " << -*band.minD;
        diag << ": key blocks outside the band are skipped";
      } else {
        op.emitRemark("no key band in the mask (no conjunct compares q - kv with a "
                      "constant); every key block is computed and masked");
      }
    }
  }
};

} // namespace
