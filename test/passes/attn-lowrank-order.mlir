// RUN: attnc-opt %s -split-input-file --attn-lowrank-order | FileCheck %s
// RUN: attnc-opt %s -split-input-file --attn-lowrank-order="report=true" 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK

// k = 64 ≪ N = 1024: projecting the layer input first is cheaper
// (2·64·1024·128 + 2·64·128·128 vs 2·1024·128·128 + 2·2·64·1024·64 FLOPs).
// REMARK: remark: projecting before the K/V map: 18874368 FLOPs before vs 50331648 after
// CHECK-LABEL: func.func @test_before
// CHECK-SAME: (%[[X:.+]]: tensor<1x1024x128xf32>, %[[W:.+]]: tensor<128x128xf32>, %[[E:.+]]: tensor<64x1024xf32>)
// CHECK-NEXT: %[[EX:.+]] = attn.seq_project %[[E]], %[[X]] {order = "before"} : (tensor<64x1024xf32>, tensor<1x1024x128xf32>) -> tensor<1x64x128xf32>
// CHECK-NEXT: %[[K:.+]] = attn.linear %[[EX]], %[[W]] : (tensor<1x64x128xf32>, tensor<128x128xf32>) -> tensor<1x2x64x64xf32>
// CHECK-NEXT: return %[[K]]
func.func @test_before(%x: tensor<1x1024x128xf32>, %w: tensor<128x128xf32>, %e: tensor<64x1024xf32>) -> tensor<1x2x64x64xf32> {
  %k = attn.linear %x, %w : (tensor<1x1024x128xf32>, tensor<128x128xf32>) -> tensor<1x2x1024x64xf32>
  %kp = attn.seq_project %e, %k : (tensor<64x1024xf32>, tensor<1x2x1024x64xf32>) -> tensor<1x2x64x64xf32>
  return %kp : tensor<1x2x64x64xf32>
}

// -----

// k close to N with a wide input: mapping first is cheaper; nothing moves.
// REMARK: remark: projecting after the K/V map: 15728640 FLOPs before vs 8880128 after
// CHECK-LABEL: func.func @test_after
// CHECK: attn.linear
// CHECK-NEXT: attn.seq_project {{.*}} {order = "after"}
func.func @test_after(%x: tensor<1x64x1024xf32>, %w: tensor<1024x64xf32>, %e: tensor<60x64xf32>) -> tensor<1x1x60x64xf32> {
  %k = attn.linear %x, %w : (tensor<1x64x1024xf32>, tensor<1024x64xf32>) -> tensor<1x1x64x64xf32>
  %kp = attn.seq_project %e, %k : (tensor<60x64xf32>, tensor<1x1x64x64xf32>) -> tensor<1x1x60x64xf32>
  return %kp : tensor<1x1x60x64xf32>
}

// -----

// K given directly, or a per-head projection: "after", with the reason.
// REMARK: remark: projecting after the K/V map: its input is not a linear map used only here with a projection shared by heads
// CHECK-LABEL: func.func @test_direct
// CHECK: attn.seq_project {{.*}} {order = "after"}
func.func @test_direct(%k: tensor<1x2x32x16xf32>, %e: tensor<2x8x32xf32>) -> tensor<1x2x8x16xf32> {
  %kp = attn.seq_project %e, %k : (tensor<2x8x32xf32>, tensor<1x2x32x16xf32>) -> tensor<1x2x8x16xf32>
  return %kp : tensor<1x2x8x16xf32>
}
