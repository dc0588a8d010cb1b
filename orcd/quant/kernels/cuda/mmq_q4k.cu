// y[M, N] = x[M, K] @ W[N, K].T for decode batches, W in GGUF Q4_K blocks, x quantized to int8 per 32
// inputs (mmq_x.py: xq int8 [M, K], xd = max|x| / 127 and xs = sum(x), float32 [M, K / 32]).
// Compiled at run time by NVRTC (mmq_cuda.py), which prepends the configuration:
//   NW warps per block, MT 16-row weight tiles per warp, TT 8-token tiles (M <= 8 * TT),
//   OUT_KIND 0 bf16 / 1 fp16 / 2 fp32 output, HAS_BIAS (bias float32 [N]).
//
// The int8 tensor-core instruction mma.m16n8k32 takes the weights as A (16 rows x 32 inputs) and x as B
// (32 inputs x 8 tokens), so one instruction covers one Q4_K sub-block (32 inputs, one scale and min)
// of 16 weight rows for 8 tokens. Lane (g = lane / 4, t = lane % 4) holds A's rows g and g + 8, B's
// token g and C's (rows g, g + 8) x (tokens 2t, 2t + 1). The dot over 32 inputs may take them in any
// order as long as A and B agree: lane t takes bytes 8t .. 8t + 7 of each 32-byte chunk of quants
// (its A columns 4t.. and 16 + 4t.. are bytes 8t.. and 8t + 4..; its B rows the same inputs of x), so
// every weight and x load is one 8-byte load and the four lanes of a group read 32 contiguous bytes.
// Chunk c (bytes 16 + 32c .. of a 144-byte block) holds sub-block 2c in its low nibbles, 2c + 1 in its
// high ones: one mask (and one shift) turns a word into four int8 values 0..15.
// Per sub-block j the int32 dot is scaled in fp32: acc += d*sc_j * dx_j * dot(q, xq) - dmin*m_j * xs_j.
//
// A block owns 16 * MT weight rows and every token; its warps take the row's super-blocks in turn
// (warp w: w, w + NW, ...) and their partial sums are added in warp order through shared memory, so a
// result does not depend on timing.

__device__ __forceinline__ void mma_s8(int c[4], unsigned int a0, unsigned int a1, unsigned int a2,
                                       unsigned int a3, unsigned int b0, unsigned int b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}

extern "C" __global__ void __launch_bounds__(NW * LANES)
mmq_q4k(const unsigned char* __restrict__ w, const signed char* __restrict__ xq,
        const float* __restrict__ xd, const float* __restrict__ xs, const float* __restrict__ bias,
        void* __restrict__ y, int M, int N, int nb) {
  const int lane = threadIdx.x % LANES, warp = threadIdx.x / LANES;
  const int g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * 16 * MT;
  const long long K = (long long)nb * 256, KB = (long long)nb * 8;  // inputs, 32-input groups per row
  const long long row_bytes = (long long)nb * 144;
  float acc[SLOTS];
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) acc[s] = 0.f;

  for (int sb = warp; sb < nb; sb += NW) {
    uint4 hd[MT][2];     // headers of rows g, g + 8 of each tile
    uint2 qs[MT][2][4];  // bytes 8t .. 8t + 7 of each 32-byte chunk c
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = min(row0 + 16 * m + g + 8 * r, N - 1);  // rows past N: loaded, never stored
        const unsigned char* blk = w + row * row_bytes + sb * 144;
        hd[m][r] = *(const uint4*)blk;
#pragma unroll
        for (int c = 0; c < 4; ++c) qs[m][r][c] = *(const uint2*)(blk + 16 + 32 * c + 8 * t);
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int c = j / 2, sh = 4 * (j % 2);
      float dsc[MT][2], dmn[MT][2];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        q4k_scale(hd[m][0], j, dsc[m][0], dmn[m][0]);
        q4k_scale(hd[m][1], j, dsc[m][1], dmn[m][1]);
      }
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) {
        const int n = 8 * tt + g;  // this lane's B token
        uint2 xb = make_uint2(0u, 0u);
        if (n < M) xb = *(const uint2*)(xq + n * K + sb * 256 + 32 * j + 8 * t);
        float dx[2], sx[2];  // C's tokens 2t, 2t + 1
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int nc = 8 * tt + 2 * t + e;
          const long long gi = (long long)min(nc, M - 1) * KB + sb * 8 + j;
          dx[e] = xd[gi];
          sx[e] = xs[gi];
        }
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const unsigned int mask = 0x0F0F0F0Fu;
          int cc[4];
          mma_s8(cc, (qs[m][0][c].x >> sh) & mask, (qs[m][1][c].x >> sh) & mask, (qs[m][0][c].y >> sh) & mask,
                 (qs[m][1][c].y >> sh) & mask, xb.x, xb.y);
          float* a = acc + (m * TT + tt) * 4;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int r = i / 2, e = i % 2;  // C element i: row g + 8r, token 2t + e
            a[i] += dsc[m][r] * dx[e] * (float)cc[i] - dmn[m][r] * sx[e];
          }
        }
      }
    }
  }

  reduce_and_store(acc, bias, y, M, N, row0);
}
