// y[M, N] = x[M, K] @ W[N, K].T for decode batches, W in GGUF Q5_0 (QTYPE 6) or Q8_0 (QTYPE 8) blocks of
// 32 inputs, x in bf16 (OUT_KIND 0) or fp16 (OUT_KIND 1): each block's integers, exact in x's type, go
// from registers into the tensor cores' mma.m16n8k16 (fp32 sums of the block, one per row and token),
// and the block's scale d multiplies those sums in fp32: no weight is rounded. Prepended by
// mmq_legacy.py: QTYPE, KNAME (the function's name), U (blocks whose loads a warp issues together), NW
// warps per block, MT 16-row weight tiles per warp, TT 8-token tiles (M <= 8 * TT), OUT_KIND, HAS_BIAS
// (bias [N]: 1 float32, 2 in the output type), WIDE, then common.cuh and w16.cuh. WIDE 0: a block owns 16 * MT weight rows, its
// warps take the 32-input blocks in turn, U at a time, each lane loading its x from global memory (L2:
// every block reads all of x). WIDE 1: each warp owns 16 * MT rows of its own; the block's warps walk the
// chunks of 256 inputs of K range blockIdx.y together, reading x from a copy in shared memory that the
// block stages once per chunk (cp.async fills the next chunk's stage meanwhile): x is read from L2 once
// per 16 * MT * NW rows, the difference at 33..64 rows. Several K ranges write fp32 partials
// (common.cuh's store_result; split_k.py adds them).
//
// Blocks (ggml): Q5_0 22 bytes = d (fp16), qh (32 high bits, bit j of input j), qs[16] (input j's low 4
// bits in the low nibble of byte j, input 16 + j's in its high nibble), weight = (q - 16) * d; Q8_0 34
// bytes = d (fp16), qs[32] (int8), weight = q * d. Blocks start at even addresses only: 16-bit loads.
//
// Fragments as in mmq_q4k_w16.cu: lane (g = lane / 4, t = lane % 4) holds A's rows g, g + 8 at columns
// 2t, 2t + 1 (a0, a1) and 2t + 8, 2t + 9 (a2, a3), B's token g at the same columns. Here product h (0, 1)
// of a block takes inputs 16h + 4t .. 16h + 4t + 3 at columns 2t, 2t + 1, 2t + 8, 2t + 9, so B's
// registers are x's 8-byte piece at 16h + 4t, and A's are the block's bytes 4t .. 4t + 3 (Q5_0: nibble h
// of qs; Q8_0: word h of qs), reordered (0, 2, 1, 3) so that one mask takes inputs (4t, 4t + 1) and a
// shift by 8 (4t + 2, 4t + 3).

#ifndef U
#define U 2
#endif
#if QTYPE == 6
#define BLOCK_BYTES 22
#else
#define BLOCK_BYTES 34
#endif

#if OUT_KIND == 0
#define NEG2_144 0xC310C310u    // (-144, -144): -(128 + 16)
#define SIXTEEN2 0x41804180u    // (16, 16)
#define NEG2_2304 0xC510C510u   // (-2304, -2304): -(16 * 128 + 128 + 128)
#else
#define NEG2_144 0xE410E410u    // (-1040, -1040): -(1024 + 16)
#define SIXTEEN2 0x4C004C00u    // (16, 16)
#define NEG2_2304 0xF448F448u   // (-17536, -17536): -(16 * 1024 + 1024 + 128)
#endif

__device__ __forceinline__ unsigned int fma2(unsigned int a, unsigned int b, unsigned int c) {
  unsigned int r;
  asm(FMA2 " %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// 32 bits from two 16-bit loads (p 2-byte aligned)
__device__ __forceinline__ unsigned int load_u32(const unsigned char* p) {
  const unsigned short* h = (const unsigned short*)p;
  return (unsigned int)h[0] | ((unsigned int)h[1] << 16);
}

#if QTYPE == 6
// q0 - 16, q1 - 16 for the 5-bit values q0, q1 at bits 0..4 and 16..20 of p, exactly: 128 + q (bf16) or
// 1024 + q (fp16) by the exponent MAGIC, minus 144 / 1040
__device__ __forceinline__ unsigned int dequant5(unsigned int p) {
  return fma2(p | MAGIC, ONE2, NEG2_144);
}

// A's registers of product h (inputs 4t, 4t + 1 in lo; 4t + 2, 4t + 3 in hi) for a row whose block bytes
// are qs (reordered) and high bits hb (qh >> (16h + 4t): bits 0..3 are this lane's four inputs)
__device__ __forceinline__ void weights(unsigned int qs, unsigned int hb, int h, unsigned int& lo,
                                        unsigned int& hi) {
  const unsigned int n = qs >> (4 * h);
  lo = dequant5((n & 0x000F000Fu) | ((hb & 1u) << 4) | ((hb & 2u) << 19));
  hi = dequant5(((n >> 8) & 0x000F000Fu) | ((hb & 4u) << 2) | ((hb & 8u) << 17));
}
#else
// q0, q1 for the int8 values whose bytes + 128 are at bits 0..7 and 16..23 of p, exactly: its nibbles as
// 128 + n (bf16) or 1024 + n (fp16), then 16 * high - 2304 (or - 17536) and + low
__device__ __forceinline__ unsigned int dequant8(unsigned int p) {
  const unsigned int lo = (p & 0x000F000Fu) | MAGIC, hi = ((p >> 4) & 0x000F000Fu) | MAGIC;
  return fma2(lo, ONE2, fma2(hi, SIXTEEN2, NEG2_2304));
}

__device__ __forceinline__ void weights(unsigned int qs, unsigned int& lo, unsigned int& hi) {
  lo = dequant8(qs);
  hi = dequant8(qs >> 8);
}
#endif

#if WIDE
// 16-bit values per staged token row: 256 + 16 (544 bytes: the 8-byte x pieces of a half warp, tokens
// g .. g + 3 at 136-word offsets, fall in four distinct groups of 8 banks)
#define LX_STRIDE 272
#define LX_STAGE (8 * TT * LX_STRIDE)  // 16-bit values per stage (34 KiB at TT 8; the launch gives two)

// Start copying x[0 .. 8 * TT - 1][256 c .. min(256 c + 256, K) - 1] into the stage xs (rows past M: row
// M - 1, computed and never stored) with cp.async and close the copy group (empty where c >= end, so that
// every iteration closes one and wait_x's count holds).
__device__ __forceinline__ void stage_chunk(unsigned short* xs, const unsigned short* __restrict__ x, int M,
                                            long long K, int c, int end) {
  if (c < end) {
    const int pieces = (int)min(32LL, (K - 256LL * c) / 8);  // 16-byte pieces of 8 inputs in chunk c
    for (int v = threadIdx.x; v < 8 * TT * 32; v += NW * LANES) {
      const int r = v / 32, piece = v % 32;
      if (piece >= pieces) continue;
      const unsigned int dst = (unsigned int)__cvta_generic_to_shared(xs + r * LX_STRIDE + 8 * piece);
      const unsigned short* src = x + min(r, M - 1) * K + 256LL * c + 8 * piece;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
    }
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}
#endif

// The products of blocks b0 .. b0 + U - 1 (those < nblk) of this warp's rows into acc: their weights
// loaded together, then per block and half h (16 inputs) one mma per tile and token tile. xp[tt]: this
// lane's x (token 8 tt + g) at input 32 b0 + 4t, in global or shared memory.
__device__ __forceinline__ void block_products(float* acc, const unsigned char* const (&wrow)[MT][2], int b0,
                                               int nblk, const unsigned short* const (&xp)[TT]) {
  const int t = threadIdx.x % 4;
  unsigned int dh[U][MT][2], qs[U][MT][2][2];  // d's fp16 bits; qs: bytes 4t .. 4t + 3 of word h, reordered
#if QTYPE == 6
  unsigned int qh[U][MT][2];
#endif
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int b = min(b0 + u, nblk - 1);  // a block past the end: loaded, its products skipped
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const unsigned char* blk = wrow[m][r] + b * BLOCK_BYTES;
        dh[u][m][r] = *(const unsigned short*)blk;
#if QTYPE == 6
        qh[u][m][r] = load_u32(blk + 2);
        qs[u][m][r][0] = qs[u][m][r][1] = __byte_perm(load_u32(blk + 6 + 4 * t), 0, 0x3120);
#else
        qs[u][m][r][0] = __byte_perm(load_u32(blk + 2 + 4 * t) ^ 0x80808080u, 0, 0x3120);
        qs[u][m][r][1] = __byte_perm(load_u32(blk + 18 + 4 * t) ^ 0x80808080u, 0, 0x3120);
#endif
      }
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (b0 + u >= nblk) break;
    uint2 xb[2][TT];  // x at inputs 32 (b0 + u) + 16h + 4t .. + 3 of each token tile
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) xb[h][tt] = *(const uint2*)(xp[tt] + 32 * u + 16 * h);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      unsigned int a[2][2][2];  // [h][row g, g + 8][columns 2t.., 2t + 8..]: the block's integers
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#if QTYPE == 6
          weights(qs[u][m][r][h], qh[u][m][r] >> (16 * h + 4 * t), h, a[h][r][0], a[h][r][1]);
#else
          weights(qs[u][m][r][h], a[h][r][0], a[h][r][1]);
#endif
      const float d0 = half_to_float(dh[u][m][0]), d1 = half_to_float(dh[u][m][1]);  // rows g, g + 8
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) {
        float c[4] = {0.f, 0.f, 0.f, 0.f};  // the block's sums for rows g (c0, c1), g + 8 (c2, c3)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          mma_16(c, a[h][0][0], a[h][1][0], a[h][0][1], a[h][1][1], xb[h][tt].x, xb[h][tt].y);
        float* out = acc + (m * TT + tt) * 4;
        out[0] = fmaf(d0, c[0], out[0]);
        out[1] = fmaf(d0, c[1], out[1]);
        out[2] = fmaf(d1, c[2], out[2]);
        out[3] = fmaf(d1, c[3], out[3]);
      }
    }
  }
}

// span: chunks of 256 inputs per K range (WIDE; gridDim.y ranges)
extern "C" __global__ void __launch_bounds__(NW * LANES)
KNAME(const unsigned char* __restrict__ w, const unsigned short* __restrict__ x,
      const void* __restrict__ bias, void* __restrict__ y, int M, int N, int nblk, int span) {
  const int lane = threadIdx.x % LANES, warp = threadIdx.x / LANES;
  const int g = lane / 4, t = lane % 4;
  const int row0 = ROW0;
  const long long K = (long long)nblk * 32, row_bytes = (long long)nblk * BLOCK_BYTES;
  float acc[SLOTS];
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) acc[s] = 0.f;
  const unsigned char* wrow[MT][2];  // rows g, g + 8 of each tile (past N: row N - 1, never stored)
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) wrow[m][r] = w + min(row0 + 16 * m + g + 8 * r, N - 1) * row_bytes;
#if WIDE
  extern __shared__ __align__(16) unsigned short xs[];  // x's tokens: two stages of LX_STAGE values
  const int first = blockIdx.y * span, end = min((nblk + 7) / 8, (int)(blockIdx.y + 1) * span);
  stage_chunk(xs, x, M, K, first, end);
  for (int c = first; c < end; ++c) {
    const unsigned short* xcur = xs + (c - first) % 2 * LX_STAGE;  // c's stage; c + 1 fills the other
    stage_chunk(xs + (c + 1 - first) % 2 * LX_STAGE, x, M, K, c + 1, end);
    wait_x();
    const int bend = min(nblk, 8 * c + 8);
    for (int b0 = 8 * c; b0 < bend; b0 += U) {
      const unsigned short* xp[TT];
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) xp[tt] = xcur + (8 * tt + g) * LX_STRIDE + 32 * (b0 - 8 * c) + 4 * t;
      block_products(acc, wrow, b0, bend, xp);
    }
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }
#else
  for (int b0 = warp * U; b0 < nblk; b0 += NW * U) {
    const unsigned short* xp[TT];  // token 8 tt + g (rows past M: M - 1) at input 32 b0 + 4t
#pragma unroll
    for (int tt = 0; tt < TT; ++tt) xp[tt] = x + min(8 * tt + g, M - 1) * K + 32LL * b0 + 4 * t;
    block_products(acc, wrow, b0, nblk, xp);
  }
#endif
  store_result(acc, bias, y, M, N, row0);
}
