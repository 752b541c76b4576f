// RUN: attnc-opt %s -split-input-file -verify-diagnostics
// Attribute parsers and attribute verifiers.

// expected-error @+1 {{LSH buckets must be even and at least 2, found 7}}
attn.variant @a attributes {shared_qk, lsh = #attn.lsh<buckets = 7, rounds = 1, chunk = 4, before = 1, after = 0, seed = 0, dense_fallback = true>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{LSH rounds must be in [1, 64], found 0}}
attn.variant @a attributes {shared_qk, lsh = #attn.lsh<buckets = 8, rounds = 0, chunk = 4, before = 1, after = 0, seed = 0, dense_fallback = true>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{LSH chunk must be at least 1, found 0}}
attn.variant @a attributes {shared_qk, lsh = #attn.lsh<buckets = 8, rounds = 1, chunk = 0, before = 1, after = 0, seed = 0, dense_fallback = true>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{LSH before/after must be in [0, 16], found 1/17}}
attn.variant @a attributes {shared_qk, lsh = #attn.lsh<buckets = 8, rounds = 1, chunk = 4, before = 1, after = 17, seed = 0, dense_fallback = true>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{LSH seed must be non-negative, found -1}}
attn.variant @a attributes {shared_qk, lsh = #attn.lsh<buckets = 8, rounds = 1, chunk = 4, before = 1, after = 0, seed = -1, dense_fallback = true>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{low-rank k must be positive or auto, found 0}}
attn.variant @a attributes {lowrank = #attn.lowrank<k = 0, share = none>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{tile warps must be 1, 2, 4, 8 or 16, found 3}}
attn.variant @a attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = 3, stages = auto>}

// -----

// expected-error @+1 {{tile block sizes must be in [1, 1024] or auto, found 0x64}}
attn.variant @a attributes {tile = #attn.tile<block_q = 0, block_kv = 64, warps = 4, stages = auto>}

// -----

// expected-error @+1 {{tile stages must be in [1, 8], found 9}}
attn.variant @a attributes {tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = 9>}

// -----

// expected-error @+1 {{unknown sharing mode 'both'}}
attn.variant @a attributes {lowrank = #attn.lowrank<k = 4, share = both>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{unknown key 'rank'}}
attn.variant @a attributes {lowrank = #attn.lowrank<rank = 4, share = none>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{key 'k' given twice}}
attn.variant @a attributes {lowrank = #attn.lowrank<k = 4, k = 5>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{missing key 'share'}}
attn.variant @a attributes {lowrank = #attn.lowrank<k = 4>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{expected true or false}}
attn.variant @a attributes {shared_qk, lsh = #attn.lsh<buckets = 8, rounds = 1, chunk = 4, before = 1, after = 0, seed = 0, dense_fallback = yes>, tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}

// -----

// expected-error @+1 {{expected 'learned' or 'fixed'}}
attn.variant @a attributes {params = [#attn.param<"p" = 1.0, trained>], tile = #attn.tile<block_q = auto, block_kv = auto, warps = auto, stages = auto>}
