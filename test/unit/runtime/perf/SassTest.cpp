//===- SassTest.cpp - Reading SASS: instructions, loops, pipes ------------===//
//
// runtime/perf/Sass.h on nvdisasm-format text written here, so every count
// is known: two kernels, one with a loop nest (an outer loop with two back
// edges and an inner loop), the trap's branch to itself after EXIT, and
// the control words of `-hex`.
//
//===----------------------------------------------------------------------===//
#include "runtime/perf/Sass.h"

#include <gtest/gtest.h>

using namespace attnc::perf;

namespace {

// Control words: bits 41..44 of the second word are the stall count.
// 0x000fea0000001818 >> 41 = 0x7f5 -> stall 5; 0x000fe20000000000 -> 1;
// 0x002fc40000000000 -> stall 2.
const char *kTwoKernels = R"(	.target	sm_80

//--------------------- .text.loops              --------------------------
	.section	.text.loops,"ax",@progbits
        .global         loops
loops:
.text.loops:
        /*0000*/                   S2R R0, SR_TID.X ;                        /* 0x0000000000007919 */
                                                                             /* 0x000fe20000000000 */
        /*0010*/                   IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28] ;   /* 0x00000a00ff017624 */
                                                                             /* 0x000fe20000000000 */
.L_x_0:
        /*0020*/                   LDSM.16.M88.4 R4, [R12] ;                 /* 0x000000000c04783b */
                                                                             /* 0x000fea0000001818 */
        /*0030*/                   HMMA.16816.F32 R8, R4, R6, R8 ;           /* 0x000000060408723c */
                                                                             /* 0x000fea0000001818 */
.L_x_1:
        /*0040*/                   MUFU.EX2 R2, R2 ;                         /* 0x0000000002027308 */
                                                                             /* 0x002fc40000000000 */
        /*0050*/                   FFMA R3, R2, 0.5, R3 ;                    /* 0x3f00000002037823 */
                                                                             /* 0x002fc40000000000 */
        /*0060*/               @P0 BRA `(.L_x_1) ;                          /* 0x0000000000008947 */
                                                                             /* 0x000fe20000000000 */
        /*0070*/                   LDS.128 R16, [R20+0x100] ;                /* 0x0001000014107984 */
                                                                             /* 0x000fe20000000000 */
        /*0080*/              @!P1 BRA `(.L_x_0) ;                          /* 0x0000000000009947 */
                                                                             /* 0x000fe20000000000 */
        /*0090*/                   STS.U16 [R21], R16 ;                      /* 0x0000001015007388 */
                                                                             /* 0x000fe20000000000 */
        /*00a0*/               @P2 BRA `(.L_x_0) ;                          /* 0x0000000000002947 */
                                                                             /* 0x000fe20000000000 */
        /*00b0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;             /* 0x0000000000007b1d */
                                                                             /* 0x000fe20000000000 */
        /*00c0*/                   EXIT ;                                    /* 0x000000000000794d */
                                                                             /* 0x000fe20000000000 */
.L_x_2:
        /*00d0*/                   BRA `(.L_x_2);                            /* 0xfffffff000007947 */
                                                                             /* 0x000fc0000383ffff */
.L_x_3:

//--------------------- .text.straight           --------------------------
	.section	.text.straight,"ax",@progbits
straight:
.text.straight:
        /*0000*/                   LDG.E R4, [R2.64] ;
        /*0010*/                   IADD3 R1, R1, -0x80, RZ ;
        /*0020*/                   STG.E [R2.64], R4 ;
        /*0030*/                   EXIT ;
)";

} // namespace

TEST(Sass, ReadsFunctionsInstructionsAndControlWords) {
  auto fns = parseSass(kTwoKernels);
  ASSERT_TRUE(fns) << fns.error();
  ASSERT_EQ(fns->size(), 2u);
  const SassFunction &f = (*fns)[0];
  EXPECT_EQ(f.name, "loops");
  ASSERT_EQ(f.code.size(), 14u);
  EXPECT_EQ(f.code[2].opcode, "LDSM.16.M88.4");
  EXPECT_EQ(f.code[2].operands, "R4, [R12]");
  EXPECT_EQ(f.code[2].offset, 0x20u);
  EXPECT_EQ(f.code[2].stall, 5);
  EXPECT_EQ(f.code[4].stall, 2);
  EXPECT_EQ(f.code[0].stall, 1);
  EXPECT_EQ(f.code[6].predicate, "@P0");
  EXPECT_EQ(f.code[6].target, ".L_x_1");
  EXPECT_EQ(f.code[8].predicate, "@!P1");
  EXPECT_EQ(f.labels.at(".L_x_0"), 2u);
  EXPECT_EQ(f.labels.at(".L_x_3"), 14u); // after the last instruction
  const SassFunction &g = (*fns)[1];
  EXPECT_EQ(g.name, "straight");
  ASSERT_EQ(g.code.size(), 4u);
  EXPECT_EQ(g.code[0].stall, -1); // no -hex words
}

TEST(Sass, FindsTheLoopNestAndSkipsTheTrap) {
  auto fns = parseSass(kTwoKernels);
  ASSERT_TRUE(fns) << fns.error();
  std::vector<SassLoop> loops = findLoops((*fns)[0]);
  ASSERT_EQ(loops.size(), 2u); // the two back edges to .L_x_0 are one loop
  EXPECT_EQ(loops[0].first, 2u);
  EXPECT_EQ(loops[0].last, 10u);
  EXPECT_EQ(loops[0].depth, 0);
  EXPECT_FALSE(loops[0].innermost);
  EXPECT_EQ(loops[1].first, 4u);
  EXPECT_EQ(loops[1].last, 6u);
  EXPECT_EQ(loops[1].depth, 1);
  EXPECT_TRUE(loops[1].innermost);
  EXPECT_TRUE(findLoops((*fns)[1]).empty());
}

TEST(Sass, CountsTheHotLoopByPipe) {
  auto fns = parseSass(kTwoKernels);
  ASSERT_TRUE(fns) << fns.error();
  const SassFunction &f = (*fns)[0];
  std::vector<SassLoop> loops = findLoops(f);
  const SassLoop *hot = hotLoop(f, loops);
  ASSERT_NE(hot, nullptr);
  EXPECT_EQ(hot->first, 2u); // the loop with the MMA, not the inner one
  PipeCounts c = countRange(f, hot->first, hot->last);
  EXPECT_EQ(c.total, 9);
  EXPECT_EQ(c.of(Pipe::Tensor), 1);
  EXPECT_EQ(c.of(Pipe::Shared), 3); // LDSM, LDS.128, STS.U16
  EXPECT_EQ(c.of(Pipe::Mufu), 1);
  EXPECT_EQ(c.of(Pipe::Fma), 1);
  EXPECT_EQ(c.of(Pipe::Control), 3);
  EXPECT_DOUBLE_EQ(c.tensorFlops, 2.0 * 16 * 8 * 16);
  EXPECT_DOUBLE_EQ(c.sharedBytes, 512 + 512 + 64);
  // Stalls 5 + 5 + 2 + 2 + 1 + 1 + 1 + 1 + 1.
  EXPECT_DOUBLE_EQ(c.stallCycles, 19);
  PipeCounts whole = countRange((*fns)[1], 0, 3);
  EXPECT_EQ(whole.of(Pipe::Global), 2);
  EXPECT_EQ(whole.of(Pipe::Alu), 1);
  EXPECT_DOUBLE_EQ(whole.stallCycles, -1);
}

TEST(Sass, SortsOpcodesOntoPipes) {
  struct Case {
    const char *opcode;
    Pipe pipe;
    double sharedBytes, flops;
  } cases[] = {
      {"HMMA.16816.F32", Pipe::Tensor, 0, 4096},
      {"HMMA.16816.F32.BF16", Pipe::Tensor, 0, 4096},
      {"HMMA.1688.F32", Pipe::Tensor, 0, 2048},
      {"HGMMA.64x128x16.F32", Pipe::Tensor, 0, 2.0 * 64 * 128 * 16 / 4},
      {"LDSM.16.M88.4", Pipe::Shared, 512, 0},
      {"LDSM.16.MT88.2", Pipe::Shared, 256, 0},
      {"LDSM.16.MT88", Pipe::Shared, 128, 0},
      {"LDS", Pipe::Shared, 128, 0},
      {"LDS.64", Pipe::Shared, 256, 0},
      {"STS.128", Pipe::Shared, 512, 0},
      {"LDGSTS.E.BYPASS.128", Pipe::Global, 512, 0},
      {"LDG.E.CONSTANT", Pipe::Global, 0, 0},
      {"LDL", Pipe::Local, 0, 0},
      {"STL.128", Pipe::Local, 0, 0},
      {"MUFU.EX2", Pipe::Mufu, 0, 0},
      {"FFMA", Pipe::Fma, 0, 0},
      {"IMAD.MOV.U32", Pipe::Fma, 0, 0},
      {"IADD3", Pipe::Alu, 0, 0},
      {"FMNMX", Pipe::Alu, 0, 0},
      {"F2FP.PACK_AB", Pipe::Alu, 0, 0},
      {"ULDC.64", Pipe::Uniform, 0, 0},
      {"S2UR", Pipe::Uniform, 0, 0},
      {"SHFL.BFLY", Pipe::Shuffle, 0, 0},
      {"BAR.SYNC.DEFER_BLOCKING", Pipe::Barrier, 0, 0},
      {"DEPBAR.LE", Pipe::Barrier, 0, 0},
      {"BSSY", Pipe::Control, 0, 0},
      {"DFMA", Pipe::Fp64, 0, 0},
  };
  for (const Case &c : cases) {
    InstructionCost cost = costOf(c.opcode);
    EXPECT_EQ(cost.pipe, c.pipe) << c.opcode << " on " << pipeName(cost.pipe);
    EXPECT_DOUBLE_EQ(cost.sharedBytes, c.sharedBytes) << c.opcode;
    EXPECT_DOUBLE_EQ(cost.tensorFlops, c.flops) << c.opcode;
  }
}

TEST(Sass, RefusesWhatItCannotRead) {
  auto missing = parseSass("//--------------------- .text.k --------\nk:\n"
                           "        /*0000*/   @P0 BRA `(.L_x_9) ;\n");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().find("k"), std::string::npos);
  EXPECT_NE(missing.error().find(".L_x_9"), std::string::npos);
  auto noSemicolon = parseSass("//--------------------- .text.k --------\nk:\n"
                               "        /*0000*/   IADD3 R1, R1, 0x1\n");
  ASSERT_FALSE(noSemicolon);
  EXPECT_NE(noSemicolon.error().find("offset 0"), std::string::npos);
  // Text before any function (nvdisasm's warnings) is no error.
  auto empty = parseSass("nvdisasm warning : Dataflow analysis disabled\n");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}
