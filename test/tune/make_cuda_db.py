"""Writes a tuning database holding one CUDA choice, as attnc tune --target
cuda would record it on an H200 (sm_90): attnc compile --target cuda must
use it for sm_90 and not for another arch. argv: attnc binary, spec, out."""
import json
import re
import subprocess
import sys

attnc, spec, out = sys.argv[1:4]
# The toolchain key: attnc's version and the NVRTC that compiles here.
version = re.search(r"attnc (\S+)", subprocess.run([attnc, "--version"], capture_output=True,
                                                   text=True).stdout).group(1)
log = subprocess.run([attnc, "compile", spec, "--check-nvrtc", "--arch", "sm_90"],
                     capture_output=True, text=True).stdout
nvrtc = re.search(r"NVRTC (\S+) sm_90", log).group(1)
entry = {
    "device": {"kind": "cuda", "name": "NVIDIA H200", "cc_major": 9, "cc_minor": 0,
               "sm_count": 132, "memory_bytes": 150754820096, "logical_cpus": 0, "isa": ""},
    "toolchain": f"attnc {version}; NVRTC {nvrtc}",
    "kernel": {"signature": "cuda attention f16 d64 fwd g", "shape_bucket": "n256-bh2"},
    "config": "bkv=32,bq=64,s=2,w=4", "median_ms": 0.5, "spread": 0.01, "pinned": False,
    "updated": "2026-11-30T00:00:00.000Z", "measured": [],
}
json.dump({"format_version": 1, "entries": [entry]}, open(out, "w"), indent=1)
