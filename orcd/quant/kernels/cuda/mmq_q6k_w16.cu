// y[M, N] = x[M, K] @ W[N, K].T for decode batches, W in Q6_K blocks in the split layout (layout.py:
// block (r, b)'s ql | qh | scales at byte (r * nb + b) * 208, 16-byte aligned; its fp16 d in `dt` at
// r * nb + b), x in bf16 / fp16: as mmq_q4k_w16.cu (same fragments, same x loads), with Q6_K's values.
// Prepended by mmq_cuda.py: the configuration, common.cuh, w16.cuh.
//
// Q6_K: input 128n + 32u + l (half n, quarter u, l < 32) is the nibble u / 2 of ql[64n + 32(u % 2) + l]
// with bits 2u, 2u + 1 of qh[32n + l] above it, minus 32, times d * scales[8n + 2u + l / 16] (int8).
// Sub-block j = 4n + u takes the place of Q4_K's: lane t's word wi covers l = 8t + 4wi .. + 3 (one scale:
// l / 16 = t / 2), its ql and qh words reordered (0, 2, 1, 3) once, so a pair of 6-bit values is
// (ql >> s) & 0x000F000F | ((qh >> 2u) & 0x00030003) << 4 in the low mantissa bits of MAGIC.

// the pair of 6-bit values (bits 0..5 and 16..21 of p) as ((q0 - 32) * s, (q1 - 32) * s)
__device__ __forceinline__ unsigned int dequant6_pair(unsigned int p, unsigned int s2) {
  unsigned int v = p | MAGIC, q, r;
  asm(FMA2 " %0, %1, %2, %3;" : "=r"(q) : "r"(v), "r"(ONE2), "r"(NEG2_32));  // exact: q0 - 32, q1 - 32
  asm(FMA2 " %0, %1, %2, %3;" : "=r"(r) : "r"(q), "r"(s2), "r"(0x80008000u));  // + (-0): q * s rounded
  return r;
}

__device__ __forceinline__ unsigned int six_bits(unsigned int ql, unsigned int qh, int ls, int hs) {
  return ((ql >> ls) & 0x000F000Fu) | (((qh >> hs) & 0x00030003u) << 4);
}

extern "C" __global__ void __launch_bounds__(NW * LANES)
mmq_q6k_w16(const unsigned char* __restrict__ w, const unsigned short* __restrict__ dt,
            const unsigned short* __restrict__ x, const void* __restrict__ bias, void* __restrict__ y, int M,
            int N, int nb, int span) {
  const int lane = threadIdx.x % LANES, warp = threadIdx.x / LANES;
  const int g = lane / 4, t = lane % 4;
  const int row0 = ROW0;
  const long long K = (long long)nb * 256;
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
    uint2 ql[MT][2][4];  // [tile][row g, g + 8][2n + ql half]: bytes 8t .. 8t + 7, reordered per word
    uint2 qh[MT][2][2];  // [tile][row][n]
    uint4 sc[MT][2];     // the 16 int8 scales
    float d[MT][2];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = min(row0 + 16 * m + g + 8 * r, N - 1);  // rows past N: loaded, never stored
        const long long b = (long long)row * nb + sb;
        const unsigned char* blk = w + b * 208;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint2 q = *(const uint2*)(blk + 32 * i + 8 * t);
          ql[m][r][i] = make_uint2(__byte_perm(q.x, 0, 0x3120), __byte_perm(q.y, 0, 0x3120));
        }
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const uint2 q = *(const uint2*)(blk + 128 + 32 * n + 8 * t);
          qh[m][r][n] = make_uint2(__byte_perm(q.x, 0, 0x3120), __byte_perm(q.y, 0, 0x3120));
        }
        sc[m][r] = *(const uint4*)(blk + 192);
        d[m][r] = half_to_float(dt[b]);
      }
    }
#if WIDE
    wait_x();  // sb's stage has landed (the weights' loads above are in flight meanwhile)
#endif
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int n = j / 4, u = j % 4;
      const int ls = 4 * (u / 2), hs = 2 * u;
      const int si = 8 * n + 2 * u + t / 2;  // this lane's scale byte
      unsigned int s2[MT][2];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint4 v = sc[m][r];
          const unsigned int word = si < 4 ? v.x : (si < 8 ? v.y : (si < 12 ? v.z : v.w));
          const int s = (int)(signed char)((word >> (8 * (si % 4))) & 255u);
          const float ds = d[m][r] * (float)s;
          s2[m][r] = pack2(ds, ds);
        }
      }
      uint4 xb[TT];  // x at inputs 32j + 8t .. + 7 of each token tile
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) xb[tt] = X_PIECE(tt, sb, j);
#pragma unroll
      for (int wi = 0; wi < 2; ++wi) {
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const uint2 l0 = ql[m][0][2 * n + u % 2], l1 = ql[m][1][2 * n + u % 2];
          const unsigned int q0 = wi ? l0.y : l0.x, q1 = wi ? l1.y : l1.x;
          const unsigned int h0 = wi ? qh[m][0][n].y : qh[m][0][n].x;
          const unsigned int h1 = wi ? qh[m][1][n].y : qh[m][1][n].x;
          const unsigned int a0 = dequant6_pair(six_bits(q0, h0, ls, hs), s2[m][0]);
          const unsigned int a1 = dequant6_pair(six_bits(q1, h1, ls, hs), s2[m][1]);
          const unsigned int a2 = dequant6_pair(six_bits(q0, h0, ls + 8, hs + 8), s2[m][0]);
          const unsigned int a3 = dequant6_pair(six_bits(q1, h1, ls + 8, hs + 8), s2[m][1]);
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
