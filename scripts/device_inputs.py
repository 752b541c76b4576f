"""Writes the inputs of one device-check case (deterministic)."""
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "run"))
import stio  # noqa: E402

d, B, H, N, D = sys.argv[1], *map(int, sys.argv[2:6])
rng = random.Random(7)
n = B * H * N * D
t = lambda: ("F32", [B, H, N, D], [rng.gauss(0, 1) for _ in range(n)])  # noqa: E731
stio.write(d + "/in.safetensors", {"q": t(), "k": t(), "v": t(),
                                   "lengths": ("I32", [B], [N - 37 * b for b in range(B)])})
stio.write(d + "/dout.safetensors", {"dout": t()})
spec = open(d + "/spec.attn").read()
if "lowrank" in spec:
    k = int(spec.split("k = ")[1].split(",")[0])
    e = [rng.gauss(0, 1) / N ** 0.5 for _ in range(k * N)]
    f = [rng.gauss(0, 1) / N ** 0.5 for _ in range(k * N)]
    stio.write(d + "/weights.safetensors", {"E": ("F32", [k, N], e), "F": ("F32", [k, N], f)})
