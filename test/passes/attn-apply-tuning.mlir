// RUN: attnc compile %S/Inputs/apply-tuning.attn --emit=mlir > %t.mlir
// On CUDA, the newest entry of any GPU of the arch, NVRTC toolchain as given.
// RUN: attnc-opt %t.mlir --attn-apply-tuning="db=%S/Inputs/apply-tuning-db.json target=cuda arch=sm_90 cuda-toolchain=test-nvrtc accuracy=false report=true" 2>%t.err | FileCheck %s --check-prefix=CUDA
// RUN: FileCheck %s --check-prefix=CUDALOG < %t.err
// CUDA: attn.variant @g attributes {causal, tile = #attn.tile<block_q = 64, block_kv = 32, warps = 4, stages = 2>}
// CUDA: attn.variant @la attributes {lowrank = #attn.lowrank<k = auto, share = headwise>
// CUDALOG: attnc: g: tuned tile bkv=32,bq=64,s=2,w=4 (0.5 ms on NVIDIA H200) from {{.*}}apply-tuning-db.json

// Another arch has no entry: the tile stays auto for attn-tile, and says so.
// RUN: attnc-opt %t.mlir --attn-apply-tuning="db=%S/Inputs/apply-tuning-db.json target=cuda arch=sm_80 cuda-toolchain=test-nvrtc accuracy=false report=true" 2>%t.err80 | FileCheck %s --check-prefix=SM80
// RUN: FileCheck %s --check-prefix=SM80LOG < %t.err80
// SM80: attn.variant @g attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// SM80LOG: attnc: note: no CUDA tuning entry for g (n256-bh2, sm_80) in {{.*}}apply-tuning-db.json; using the heuristic tile

// CPU accuracy: of the budgets measured for la's shape, the tightest wins.
// RUN: attnc-opt %t.mlir --attn-apply-tuning="db=%S/Inputs/apply-tuning-db.json target=cpu device=cpu:TestCPU:avx2:2cpus toolchain=test-cc report=true" 2>%t.errcpu | FileCheck %s --check-prefix=CPU
// RUN: FileCheck %s --check-prefix=CPULOG < %t.errcpu
// CPU: attn.variant @la attributes {lowrank = #attn.lowrank<k = 128, share = headwise>
// CPULOG: attnc: la: k=128 from {{.*}}apply-tuning-db.json (max_error 0.2, 0.25 ms)

// The FFN row chunk (cpu): gm's entry is all rows (chunk 0 in the IR),
// lam's 64; on CUDA it stays auto for attn-resolve-tunables.
// RUN: attnc-opt %t.mlir --attn-apply-tuning="db=%S/Inputs/apply-tuning-ffn-db.json target=cpu device=cpu:TestCPU:avx2:2cpus toolchain=test-cc report=true" 2>%t.errffn | FileCheck %s --check-prefix=FFN
// RUN: FileCheck %s --check-prefix=FFNLOG < %t.errffn
// RUN: attnc-opt %t.mlir --attn-apply-tuning="db=%S/Inputs/apply-tuning-ffn-db.json target=cuda arch=sm_90 cuda-toolchain=test-nvrtc accuracy=false" | FileCheck %s --check-prefix=FFNCUDA
// FFN: attn.layer @g ffn(gelu, chunk = 0)
// FFN: attn.layer @la ffn(gelu, chunk = 64)
// FFNLOG: attnc: ffn: tuned chunk=all (1.5 ms per layer step) from {{.*}}apply-tuning-ffn-db.json
// FFNLOG: attnc: ffn: tuned chunk=64 (2.5 ms per layer step) from {{.*}}apply-tuning-ffn-db.json
// FFNCUDA: attn.layer @g ffn(gelu, chunk = auto)
// FFNCUDA: attn.layer @la ffn(gelu, chunk = auto)
// A chunk of 0 resolves to itself and expands unchunked.
// RUN: attnc-opt %t.mlir --attn-apply-tuning="db=%S/Inputs/apply-tuning-ffn-db.json target=cpu device=cpu:TestCPU:avx2:2cpus toolchain=test-cc" --attn-resolve-tunables --attn-expand-model="batch=1 infer=false" | FileCheck %s --check-prefix=ALLROWS
// ALLROWS-LABEL: func.func @train_gm(
// ALLROWS-NOT: attn.row_chunks
// ALLROWS-LABEL: func.func @train_lam(
// ALLROWS: attn.row_chunks chunk 64(

// Another toolchain's entries do not apply.
// RUN: attnc-opt %t.mlir --attn-apply-tuning="db=%S/Inputs/apply-tuning-db.json target=cpu device=cpu:TestCPU:avx2:2cpus toolchain=other-cc report=true" 2>%t.errtc | FileCheck %s --check-prefix=OTHER
// RUN: FileCheck %s --check-prefix=OTHERLOG < %t.errtc
// OTHER: attn.variant @la attributes {lowrank = #attn.lowrank<k = auto, share = headwise>
// OTHERLOG: attnc: note: la leaves k auto and {{.*}}apply-tuning-db.json has no accuracy entry for it (attnc tune --max-error measures one); using the heuristic

// A database that cannot be read changes nothing and says why.
// RUN: echo '{' > %t.bad.json
// RUN: attnc-opt %t.mlir --attn-apply-tuning="db=%t.bad.json target=cuda arch=sm_90 report=true" 2>%t.errbad | FileCheck %s --check-prefix=SM80
// RUN: FileCheck %s --check-prefix=BAD < %t.errbad
// BAD: attnc: warning: {{.*}}bad.json{{.*}}; using the heuristic tile

// A target it does not know is an error.
// RUN: not attnc-opt %t.mlir --attn-apply-tuning="db=%S/Inputs/apply-tuning-db.json target=gpu" 2>&1 | FileCheck %s --check-prefix=TARGET
// TARGET: error: attn-apply-tuning: target must be cpu or cuda, found 'gpu'

// A run folder's pins (run-choices) come first: they fill the named
// model's autos before the database (whose k=128 for la loses to the pinned
// k=48) and leave other models alone.
// RUN: attnc-opt %t.mlir --attn-apply-tuning="db=%S/Inputs/apply-tuning-db.json target=cpu device=cpu:TestCPU:avx2:2cpus toolchain=test-cc run-choices=model=lam,block_q=16,block_kv=32,ffn_chunk=8,k=48" | FileCheck %s --check-prefix=PINS
// PINS: attn.variant @g attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto
// PINS: attn.variant @la attributes {lowrank = #attn.lowrank<k = 48, share = headwise>, tile = #attn.tile<block_q = 16, block_kv = 32, warps = auto, stages = auto>}
// PINS: attn.layer @g ffn(gelu, chunk = auto)
// PINS: attn.layer @la ffn(gelu, chunk = 8)
// Without a database, the pins alone.
// RUN: attnc-opt %t.mlir --attn-apply-tuning="run-choices=model=gm,block_q=32,block_kv=64" | FileCheck %s --check-prefix=PINSONLY
// PINSONLY: attn.variant @g attributes {causal, tile = #attn.tile<block_q = 32, block_kv = 64, warps = auto, stages = auto>}
// A pinned -1 is the heuristic's tile, pinned: the database's entry for g
// (bq=64 on sm_90) does not apply.
// RUN: attnc-opt %t.mlir --attn-apply-tuning="db=%S/Inputs/apply-tuning-db.json target=cuda arch=sm_90 cuda-toolchain=test-nvrtc accuracy=false run-choices=model=gm,block_q=-1,block_kv=-1" | FileCheck %s --check-prefix=PINAUTO
// PINAUTO: attn.variant @g attributes {causal, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
// Pins naming no model, or a key it does not know, are errors.
// RUN: not attnc-opt %t.mlir --attn-apply-tuning="run-choices=model=nope,k=4" 2>&1 | FileCheck %s --check-prefix=PINMODEL
// PINMODEL: error: attn-apply-tuning: run-choices name no model of this module: 'nope'
// RUN: not attnc-opt %t.mlir --attn-apply-tuning="run-choices=model=gm,tile=4" 2>&1 | FileCheck %s --check-prefix=PINKEY
// PINKEY: error: attn-apply-tuning: run-choices: unknown key 'tile'
