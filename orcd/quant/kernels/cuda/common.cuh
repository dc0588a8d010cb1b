// Helpers of the decode-product kernels (prepended to each by mmq_cuda.py after scalars.cuh): the loop's
// bounds and x's source by variant, WIDE's staged copy of x, the warps' reduction.

#define LANES 32
// accumulators per lane: C element i of (tile m, token tile tt) at (m * TT + tt) * 4 + i
#define SLOTS (MT * TT * 4)

// WIDE 0: a block owns 16 * MT weight rows, its warps take the super-blocks in turn (each lane loads its
// x from global memory). WIDE 1: each warp owns 16 * MT rows of its own (a block 16 * MT * NW), all warps
// walk the super-blocks of K range blockIdx.y together and read x from a copy in shared memory that the
// block stages once per super-block: x is read once per block instead of once per 16 * MT rows, the
// difference at 32-64 rows. The copy has two stages (dynamic shared memory, XS_STAGE values each): while
// the warps multiply super-block sb out of one, cp.async fills the other with sb + 1, so the copy's L2
// round trip is off the loop's path. The loop's bounds and x's source, by variant:
#if WIDE
// 16-bit values per staged token row: 256 + 32 (576 bytes: the 16-byte loads of a quarter warp, tokens g
// and g + 1 at 64t-byte offsets, fall in 8 distinct bank groups)
#define XS_STRIDE 288
#define XS_STAGE (8 * TT * XS_STRIDE)  // 16-bit values per stage (36 KiB at TT 8; the launch gives two)
#define SB_FIRST (blockIdx.y * span)
#define SB_END min(nb, (int)(blockIdx.y + 1) * span)
#define SB_STEP 1
#define ROW0 ((blockIdx.x * NW + warp) * 16 * MT)
#define X_PIECE(tt, sb, j) (*(const uint4*)(xcur + (8 * (tt) + g) * XS_STRIDE + 32 * (j) + 8 * t))
#else
#define SB_FIRST warp
#define SB_END nb
#define SB_STEP NW
#define ROW0 (blockIdx.x * 16 * MT)
#define X_PIECE(tt, sb, j) (*(const uint4*)(xrow[tt] + (sb) * 256 + 32 * (j)))
#endif

#if WIDE
// Start copying x[0 .. 8 * TT - 1][256 sb .. 256 sb + 255] into the stage xs (rows past M: row M - 1,
// computed and never stored) with cp.async, and close the copy group (an empty group where sb >= end,
// so that every iteration closes one and wait_x's count holds).
__device__ __forceinline__ void stage_x(unsigned short* xs, const unsigned short* __restrict__ x, int M,
                                        long long K, int sb, int end) {
  if (sb < end) {
    for (int v = threadIdx.x; v < 8 * TT * 32; v += NW * LANES) {
      const int r = v / 32, c = v % 32;
      const unsigned int dst = (unsigned int)__cvta_generic_to_shared(xs + r * XS_STRIDE + 8 * c);
      const unsigned short* src = x + min(r, M - 1) * K + sb * 256 + 8 * c;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
    }
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Wait until every copy group but the newest (the next super-block's) has landed, for the whole block.
__device__ __forceinline__ void wait_x() {
  asm volatile("cp.async.wait_group 1;" ::: "memory");
  __syncthreads();
}

// The result out (WIDE): a warp's own tiles; with one K range (gridDim.y 1) y[token, row] = acc + bias in
// the output type; with several, range blockIdx.y's fp32 partial at y[(blockIdx.y * M + token) * N + row]
// (split_k.py's reduce adds them in range order, then the bias).
__device__ __forceinline__ void store_result(const float* acc, const void* bias, void* y, int M, int N,
                                             int row0) {
  const int lane = threadIdx.x % LANES, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) {
    const int m = s / (TT * 4), tt = (s / 4) % TT, i = s % 4;
    const int row = row0 + 16 * m + g + 8 * (i / 2), n = 8 * tt + 2 * t + i % 2;
    if (row >= N || n >= M) continue;
    if (gridDim.y > 1) {
      ((float*)y)[((long long)blockIdx.y * M + n) * N + row] = acc[s];
    } else {
#if HAS_BIAS
      store_out(y, (long long)n * N + row, acc[s] + bias_at(bias, row));
#else
      store_out(y, (long long)n * N + row, acc[s]);
#endif
    }
  }
}
#else
// The result out (WIDE 0): each warp's accumulators (C fragments of m16n8 products: element i of lane (g, t)
// at row g + 8 * (i / 2), token 2t + i % 2 of its tile) added in warp order through shared memory, plus
// the bias, stored as y[token, row] where both exist. A result does not depend on timing.
__device__ __forceinline__ void store_result(const float* acc, const void* bias, void* y, int M, int N,
                                             int row0) {
  __shared__ float red[NW * SLOTS * LANES];
  const int lane = threadIdx.x % LANES, warp = threadIdx.x / LANES;
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) red[(warp * SLOTS + s) * LANES + lane] = acc[s];
  __syncthreads();
  for (int v = threadIdx.x; v < SLOTS * LANES; v += NW * LANES) {
    const int s = v / LANES, ln = v % LANES;
    float sum = 0.f;
    for (int k = 0; k < NW; ++k) sum += red[(k * SLOTS + s) * LANES + ln];
    const int m = s / (TT * 4), tt = (s / 4) % TT, i = s % 4;
    const int row = row0 + 16 * m + ln / 4 + 8 * (i / 2);
    const int n = 8 * tt + 2 * (ln % 4) + i % 2;
    if (row < N && n < M) {
#if HAS_BIAS
      sum += bias_at(bias, row);
#endif
      store_out(y, (long long)n * N + row, sum);
    }
  }
}
#endif  // WIDE
