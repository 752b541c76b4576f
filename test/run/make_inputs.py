"""Writes the malformed and good inputs errors.test feeds to attnc run."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import stio  # noqa: E402

d = sys.argv[1]
x = [0.01 * i for i in range(1 * 2 * 6 * 32)]
q = ("F32", [1, 2, 6, 32], x)
stio.write(d + "/ok.safetensors", {"q": q, "k": q, "v": q})
stio.write(d + "/missing-v.safetensors", {"q": q, "k": q})
stio.write(d + "/bad-k.safetensors", {"q": q, "k": ("F32", [1, 2, 5, 32], x[:320]), "v": q})
stio.write(d + "/i32-q.safetensors", {"q": ("I32", [1, 2, 6, 32], list(range(384))), "k": q, "v": q})
stio.write(d + "/bad-lengths.safetensors", {"q": q, "k": q, "v": q, "lengths": ("I32", [1], [7])})
open(d + "/garbage.safetensors", "wb").write(b"\xff" * 64)
stio.write(d + "/bad-e.safetensors", {"E": ("F32", [3, 6], [0.0] * 18)})
stio.write(d + "/with-f.safetensors", {"E": ("F32", [4, 6], [0.0] * 24), "F": ("F32", [4, 6], [0.0] * 24)})
stio.write(d + "/bad-param.safetensors", {"t": ("F32", [3], [1.0, 1.0, 1.0])})
stio.write(d + "/dout.safetensors", {"dout": ("F32", [1, 2, 6, 32], [0.5 - 0.003 * i for i in range(384)])})
q64 = ("F32", [1, 2, 6, 64], [0.01 * i for i in range(768)])
stio.write(d + "/d64.safetensors", {"q": q64, "k": q64, "v": q64})
stio.write(d + "/bad-rot.safetensors", {"lsh_rotations": ("F32", [2, 32, 3], [0.0] * 192)})
stio.write(d + "/qv-only.safetensors", {"q": q, "v": q})
