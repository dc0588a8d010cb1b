// y[M, N] = x[M, K] @ W[N, K].T for decode batches, W in GGUF Q4_K blocks, x in bf16 (OUT_KIND 0) or
// fp16 (OUT_KIND 1) as given: the weights are dequantized to x's type in registers, right where the
// tensor cores' mma.m16n8k16 takes them (Marlin's idea, on GGUF's own bytes), fp32 accumulation.
// Prepended by mmq_cuda.py: NW warps per block, MT 16-row weight tiles per warp, TT 8-token tiles
// (M <= 8 * TT), OUT_KIND (0 bf16, 1 fp16), HAS_BIAS (bias [N]: 1 float32, 2 in the output type), then common.cuh and w16.cuh.
//
// A (16 weight rows x 16 inputs) and B (16 inputs x 8 tokens): lane (g = lane / 4, t = lane % 4) holds
// A's rows g, g + 8 at columns 2t, 2t + 1 (a0, a1) and 2t + 8, 2t + 9 (a2, a3), B's token g at the same
// four inputs, C's (rows g, g + 8) x (tokens 2t, 2t + 1). The dot may take the inputs in any order that
// A and B share: lane t takes the 4-byte word at 8t + 4wi (wi = 0, 1) of each 32-byte quant chunk c, and
// one product covers nibble h (0: sub-block 2c, 1: 2c + 1) of those words: its columns 2t, 2t + 1 are
// bytes 0, 1 of the word and 2t + 8, 2t + 9 bytes 2, 3, i.e. inputs 64c + 32h + 8t + 4wi + (0, 1) and
// + (2, 3), so B's registers are x's 16-byte row piece at 64c + 32h + 8t as loaded.
// Dequantizing two nibbles: the word's bytes reordered (0, 2, 1, 3) once, (w >> s) & 0x000F000F puts a
// pair in the low 4 mantissa bits of two 16-bit floats whose exponent makes them 128 + q (bf16 0x4300)
// or 1024 + q (fp16 0x6400); subtracting that is exact, then q * d*sc_j - dmin*m_j in one fma (d*sc_j
// and dmin*m_j rounded to x's type: the weight differs from fp32 dequantization by ~3 roundings).

// the pair (q0, q1) of 4-bit values at bits 0..3 and 16..19 of p, as (q0 * s - m, q1 * s - m)
__device__ __forceinline__ unsigned int dequant_pair(unsigned int p, unsigned int s2, unsigned int m2) {
  unsigned int v = (p & 0x000F000Fu) | MAGIC, q, r;
  asm(FMA2 " %0, %1, %2, %3;" : "=r"(q) : "r"(v), "r"(ONE2), "r"(NEG2));  // exact: the integers q0, q1
  asm(FMA2 " %0, %1, %2, %3;" : "=r"(r) : "r"(q), "r"(s2), "r"(m2 ^ 0x80008000u));
  return r;
}

// This lane's part of super-block sb of rows row0 + 16m + g (+ 8 r): each row's 16-byte header, and bytes
// 8t .. 8t + 7 of each 32-byte quant chunk c, bytes reordered (0, 2, 1, 3) per word. Rows past N: row N - 1
// (loaded, never stored).
__device__ __forceinline__ void load_q4k(const unsigned char* __restrict__ w, int row0, int N,
                                         long long row_bytes, int sb, uint4 (&hd)[MT][2],
                                         uint2 (&qs)[MT][2][4]) {
  const int lane = threadIdx.x % LANES, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = min(row0 + 16 * m + g + 8 * r, N - 1);
      const unsigned char* blk = w + row * row_bytes + sb * 144;
      hd[m][r] = *(const uint4*)blk;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        uint2 q = *(const uint2*)(blk + 16 + 32 * c + 8 * t);
        qs[m][r][c] = make_uint2(__byte_perm(q.x, 0, 0x3120), __byte_perm(q.y, 0, 0x3120));
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(NW * LANES)
mmq_q4k_w16(const unsigned char* __restrict__ w, const unsigned short* __restrict__ x,
            const void* __restrict__ bias, void* __restrict__ y, int M, int N, int nb, int span) {
  const int lane = threadIdx.x % LANES, warp = threadIdx.x / LANES;
  const int g = lane / 4, t = lane % 4;
  const int row0 = ROW0;
  const long long K = (long long)nb * 256, row_bytes = (long long)nb * 144;
  float acc[SLOTS];
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) acc[s] = 0.f;
#if WIDE
  extern __shared__ __align__(16) unsigned short xs[];  // x's tokens: two stages of XS_STAGE values
  stage_x(xs, x, M, K, SB_FIRST, SB_END);
#else
  const unsigned short* xrow[TT];  // this lane's B token of each tile (a row past M reads row M - 1)
#pragma unroll
  for (int tt = 0; tt < TT; ++tt) xrow[tt] = x + min(8 * tt + g, M - 1) * K + 8 * t;
#endif

  for (int sb = SB_FIRST; sb < SB_END; sb += SB_STEP) {
#if WIDE
    const unsigned short* xcur = xs + (sb - SB_FIRST) % 2 * XS_STAGE;  // sb's stage; sb + 1 fills the other
    stage_x(xs + (sb + 1 - SB_FIRST) % 2 * XS_STAGE, x, M, K, sb + 1, SB_END);
#endif
    uint4 hd[MT][2];     // headers of rows g, g + 8 of each tile
    uint2 qs[MT][2][4];  // bytes 8t .. 8t + 7 of each chunk c, bytes reordered (0, 2, 1, 3) per word
    load_q4k(w, row0, N, row_bytes, sb, hd, qs);
#if WIDE
    wait_x();  // sb's stage has landed (the weights' loads above are in flight meanwhile)
#endif
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int c = j / 2, sh = 4 * (j % 2);
      unsigned int s2[MT][2], m2[MT][2];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float dsc, dmn;
          q4k_scale(hd[m][r], j, dsc, dmn);
          s2[m][r] = pack2(dsc, dsc);
          m2[m][r] = pack2(dmn, dmn);
        }
      }
      uint4 xb[TT];  // x at inputs 64c + 32h + 8t .. + 7 of each token tile
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) xb[tt] = X_PIECE(tt, sb, j);
#pragma unroll
      for (int wi = 0; wi < 2; ++wi) {
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const unsigned int w0 = (wi ? qs[m][0][c].y : qs[m][0][c].x) >> sh;
          const unsigned int w1 = (wi ? qs[m][1][c].y : qs[m][1][c].x) >> sh;
          const unsigned int a0 = dequant_pair(w0, s2[m][0], m2[m][0]);
          const unsigned int a1 = dequant_pair(w1, s2[m][1], m2[m][1]);
          const unsigned int a2 = dequant_pair(w0 >> 8, s2[m][0], m2[m][0]);
          const unsigned int a3 = dequant_pair(w1 >> 8, s2[m][1], m2[m][1]);
#pragma unroll
          for (int tt = 0; tt < TT; ++tt) {
            const unsigned int b0 = wi ? xb[tt].z : xb[tt].x, b1 = wi ? xb[tt].w : xb[tt].y;
            mma_16(acc + (m * TT + tt) * 4, a0, a1, a2, a3, b0, b1);
          }
        }
      }
    }
#if WIDE
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
#endif
  }
  store_result(acc, bias, y, M, N, row0);
}
