"""End-to-end numerics of `attnc run` against a plain double-precision
reference written here (not the kernels' code): forward, backward and the
gradients of E, F and per-head parameters, for dense and low-rank variants.

Usage: check_attention.py ATTNC WORKDIR CASE...   (cases listed in CASES)
Prints one line per case and the worst error; exits 1 if any exceeds 1e-4.
"""
import math
import os
import random
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.dirname(__file__))
import checkargs  # noqa: E402
import stio  # noqa: E402

TOL = 1e-4
RUN_ARGS = []  # extra attnc run arguments (--run-args)

# name: (spec, B, H, N, D, lengths or None, lowrank (k, share) or None, Nmax)
CASES = {
    "dense": ("attention a { }", 2, 2, 7, 32, None, None, 0),
    "dense_n1": ("attention a { mask causal }", 1, 2, 1, 32, None, None, 0),
    "causal_padding": ("attention a { mask causal mask padding }", 2, 3, 37, 32, [30, 0], None, 0),
    "d80_window": ("attention a { mask causal mask q - kv < 5 }", 1, 2, 23, 80, None, None, 0),
    "d64_masked_rows": ("attention a { mask kv > 3 && q % 4 != 1 }", 1, 2, 19, 64, None, None, 0),
    "d128_n130_causal": ("attention a { mask causal }", 1, 1, 130, 128, None, None, 0),
    "alibi_temp": ("attention a { const slope(h) = alibi param temp(h) = 0.7\n"
                   " score s * temp(h) - slope(h) * float(abs(q - kv)) mask causal }",
                   2, 2, 17, 32, None, None, 0),
    "softcap": ("attention a { param cap(h) = 5.0 score cap(h) * tanh(s / cap(h)) mask padding }",
                1, 3, 21, 32, [13], None, 0),
    "lowrank_none": ("attention a { kv lowrank(k = 8, share = none) }", 2, 2, 20, 32, None, (8, "none"), 24),
    "lowrank_headwise": ("attention a { kv lowrank(k = 6, share = headwise) mask padding }",
                         2, 2, 19, 32, [19, 11], (6, "headwise"), 19),
    "lowrank_kv": ("attention a { kv lowrank(k = 8, share = kv) }", 1, 3, 13, 64, None, (8, "kv"), 16),
    "lowrank_layerwise_n_lt_k": ("attention a { kv lowrank(k = 16, share = layerwise) mask padding }",
                                 2, 2, 9, 32, [9, 4], (16, "layerwise"), 9),
    "lowrank_temp": ("attention a { kv lowrank(k = 5, share = headwise) param t(h) = 1.5 score s * t(h) }",
                     1, 2, 11, 32, None, (5, "headwise"), 11),
}


def randn(rng, n, scale=1.0):
    return [scale * rng.gauss(0, 1) for _ in range(n)]


def reference(case, q, k, v, do, E, F, params):
    """Double-precision forward and backward by the textbook formulas."""
    spec, B, H, N, D, lengths, lowrank, nmax = case
    scale = 1 / math.sqrt(D)
    idx = lambda b, h, i, d, n=N: ((b * H + h) * n + i) * D + d  # noqa: E731
    # Score modifier and mask of each case, written out by hand.
    name = [n for n, c in CASES.items() if c is case][0]
    P = len(params) // H if params else 0
    par = lambda p, h: params[p * H + h]  # noqa: E731

    def score(s, b, h, i, j):  # returns (value, d/ds, [d/dparam])
        if name == "alibi_temp":
            slope, temp = par(0, h), par(1, h)
            return s * temp - slope * abs(i - j), temp, [0.0, s]
        if name == "softcap":
            c = par(0, h)
            t = math.tanh(s / c)
            return c * t, 1 - t * t, [t - (s / c) * (1 - t * t)]
        if name == "lowrank_temp":
            t = par(0, h)
            return s * t, t, [s]
        return s, 1.0, [0.0] * P

    def keep(b, h, i, j):
        if "causal" in spec and j > i:
            return False
        if "mask padding" in spec and lengths is not None and not lowrank and j >= lengths[b]:
            return False
        if name == "d80_window":
            return i - j < 5
        if name == "d64_masked_rows":
            return j > 3 and i % 4 != 1
        return True

    # Low-rank: project K, V (keys past lengths zeroed), then dense attention.
    if lowrank:
        kk, share = lowrank
        nk = kk

        def proj(M, x, b, h):
            n_b = min(N, lengths[b]) if lengths else N
            base = h * kk * nmax if share == "none" else 0
            return [[sum(M[base + r * nmax + j] * x[idx(b, h, j, d)] for j in range(n_b))
                     for d in range(D)] for r in range(kk)]
        Fm = F if F is not None else E
        kp = {(b, h): proj(E, k, b, h) for b in range(B) for h in range(H)}
        vp = {(b, h): proj(Fm, v, b, h) for b in range(B) for h in range(H)}
        key = lambda b, h, j, d: kp[b, h][j][d]  # noqa: E731
        val = lambda b, h, j, d: vp[b, h][j][d]  # noqa: E731
    else:
        nk = N
        key = lambda b, h, j, d: k[idx(b, h, j, d)]  # noqa: E731
        val = lambda b, h, j, d: v[idx(b, h, j, d)]  # noqa: E731

    out = [0.0] * (B * H * N * D)
    lse = [-math.inf] * (B * H * N)
    dq = [0.0] * len(out)
    dkp = {(b, h): [[0.0] * D for _ in range(nk)] for b in range(B) for h in range(H)}
    dvp = {(b, h): [[0.0] * D for _ in range(nk)] for b in range(B) for h in range(H)}
    dparams = [0.0] * (P * H)
    for b in range(B):
        for h in range(H):
            for i in range(N):
                js = [j for j in range(nk) if lowrank or keep(b, h, i, j)]
                if lowrank and name == "lowrank_temp":
                    js = list(range(nk))
                if not js:
                    continue
                raw = {j: scale * sum(q[idx(b, h, i, d)] * key(b, h, j, d) for d in range(D)) for j in js}
                mod = {j: score(raw[j], b, h, i, j) for j in js}
                m = max(x[0] for x in mod.values())
                z = sum(math.exp(x[0] - m) for x in mod.values())
                L = m + math.log(z)
                lse[(b * H + h) * N + i] = L
                p = {j: math.exp(mod[j][0] - L) for j in js}
                o = [sum(p[j] * val(b, h, j, d) for j in js) for d in range(D)]
                for d in range(D):
                    out[idx(b, h, i, d)] = o[d]
                dov = [do[idx(b, h, i, d)] for d in range(D)]
                Di = sum(dov[d] * o[d] for d in range(D))
                for j in js:
                    dp = sum(dov[d] * val(b, h, j, d) for d in range(D))
                    ds = p[j] * (dp - Di)
                    g = ds * mod[j][1]
                    for pp in range(P):
                        dparams[pp * H + h] += ds * mod[j][2][pp]
                    for d in range(D):
                        dq[idx(b, h, i, d)] += scale * g * key(b, h, j, d)
                        dkp[b, h][j][d] += scale * g * q[idx(b, h, i, d)]
                        dvp[b, h][j][d] += p[j] * dov[d]
    grads = {"dq": dq}
    if not lowrank:
        grads["dk"] = [dkp[b, h][j][d] for b in range(B) for h in range(H) for j in range(N) for d in range(D)]
        grads["dv"] = [dvp[b, h][j][d] for b in range(B) for h in range(H) for j in range(N) for d in range(D)]
    else:
        kk, share = lowrank
        Fm = F if F is not None else E
        dk = [0.0] * len(k)
        dv = [0.0] * len(v)
        dE = [0.0] * len(E)
        dF = [0.0] * len(E)
        for b in range(B):
            for h in range(H):
                n_b = min(N, lengths[b]) if lengths else N
                base = h * kk * nmax if share == "none" else 0
                for j in range(n_b):
                    for d in range(D):
                        dk[idx(b, h, j, d)] = sum(E[base + r * nmax + j] * dkp[b, h][r][d] for r in range(kk))
                        dv[idx(b, h, j, d)] = sum(Fm[base + r * nmax + j] * dvp[b, h][r][d] for r in range(kk))
                for r in range(kk):
                    for j in range(n_b):
                        dE[base + r * nmax + j] += sum(dkp[b, h][r][d] * k[idx(b, h, j, d)] for d in range(D))
                        dF[base + r * nmax + j] += sum(dvp[b, h][r][d] * v[idx(b, h, j, d)] for d in range(D))
        grads["dk"], grads["dv"] = dk, dv
        if F is None:  # shared: both flows land in E
            grads["dE"] = [a + c for a, c in zip(dE, dF)]
        else:
            grads["dE"], grads["dF"] = dE, dF
    if P:
        names = {"alibi_temp": ["slope", "temp"], "softcap": ["cap"], "lowrank_temp": ["t"]}[name]
        for pp, pn in enumerate(names):
            if not (name == "alibi_temp" and pn == "slope"):  # fixed parameter: no gradient
                grads["d" + pn] = dparams[pp * H:(pp + 1) * H]
    return out, lse, grads


def run_case(attnc, work, name):
    case = CASES[name]
    spec, B, H, N, D, lengths, lowrank, nmax = case
    # zlib.crc32, not hash(): str hashes are salted per process, which made
    # every run draw other inputs.
    rng = random.Random(zlib.crc32(name.encode()) & 0xffff)
    n = B * H * N * D
    q, k, v, do = randn(rng, n), randn(rng, n), randn(rng, n), randn(rng, n)
    os.makedirs(work, exist_ok=True)
    paths = {x: os.path.join(work, name + "." + x + ".safetensors") for x in ("in", "w", "g", "out")}
    specpath = os.path.join(work, name + ".attn")
    open(specpath, "w").write(spec + "\n")
    inputs = {"q": ("F32", [B, H, N, D], q), "k": ("F32", [B, H, N, D], k), "v": ("F32", [B, H, N, D], v)}
    if lengths:
        inputs["lengths"] = ("I32", [B], lengths)
    stio.write(paths["in"], inputs)
    stio.write(paths["g"], {"dout": ("F32", [B, H, N, D], do)})
    weights, E, F, params = {}, None, None, []
    if lowrank:
        kk, share = lowrank
        shape = [H, kk, nmax] if share == "none" else [kk, nmax]
        size = math.prod(shape)
        E = randn(rng, size, 0.3)
        weights["E"] = ("F32", shape, E)
        if share in ("none", "headwise"):
            F = randn(rng, size, 0.3)
            weights["F"] = ("F32", shape, F)
    if name == "alibi_temp":
        params = [2 ** (-8 * (h + 1) / H) for h in range(H)] + [0.7 + 0.1 * h for h in range(H)]
        weights["temp"] = ("F32", [H], params[H:])
    elif name == "softcap":
        params = [5.0 - h for h in range(H)]
        weights["cap"] = ("F32", [H], params)
    elif name == "lowrank_temp":
        params = [1.5 + 0.25 * h for h in range(H)]
        weights["t"] = ("F32", [H], params)
    cmd = [attnc, "run", specpath, "--inputs", paths["in"], "--grad", paths["g"],
           "--output", paths["out"]] + RUN_ARGS
    if weights:
        stio.write(paths["w"], weights)
        cmd += ["--weights", paths["w"]]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL %s: attnc run exited %d: %s" % (name, r.returncode, r.stderr))
        return False
    got = stio.read(paths["out"])
    out, lse, grads = reference(case, q, k, v, do, E, F, params)
    worst, where = 0.0, ""
    for tname, ref in [("out", out), ("lse", lse)] + sorted(grads.items()):
        if tname not in got:
            print("FAIL %s: output lacks '%s'" % (name, tname))
            return False
        for a, b in zip(ref, got[tname][1]):
            if math.isinf(a) or math.isinf(b):
                if a != b:
                    print("FAIL %s: %s has %r where the reference has %r" % (name, tname, b, a))
                    return False
                continue
            if math.isnan(b):
                print("FAIL %s: NaN in %s" % (name, tname))
                return False
            err = abs(a - b) / max(1.0, abs(a))
            if err > worst:
                worst, where = err, tname
    ok = worst <= TOL
    print("%s %-26s max error %.2e (%s)" % ("ok  " if ok else "FAIL", name, worst, where))
    return ok


def main():
    global RUN_ARGS, TOL
    attnc, work, RUN_ARGS, TOL, cases = checkargs.parse(sys.argv, TOL)
    names = cases or list(CASES)
    failures = sum(not run_case(attnc, work, n) for n in names)
    print("%d passed, %d failed" % (len(names) - failures, failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
