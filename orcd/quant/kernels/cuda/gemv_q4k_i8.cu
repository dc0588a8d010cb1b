// One token's product y[row] = sum_k W[row, k] x[k] (+ bias, + y's old value where RES: the residual
// stream, in place) for W raw Q4_K (GGUF's 144-byte blocks; rows 16-byte aligned) and x as
// xquant.quantize_x writes it: int8 per input in 16-byte pieces, and per 32 inputs (dx, sum of the first
// 16 inputs, sum of the last 16, 0). Defines: NW warps, R rows per block, OUT_KIND, HAS_BIAS, RES, PDL.
//
// A block owns R rows; its NW warps take K's super-blocks four at a time in turn (warp w: super-blocks
// 4 (w + NW i) .. 4 (w + NW i) + 3). Lane (s = lane / 8, p = lane % 8) reads 16-byte piece p of super-block
// s's 128 quant bytes (a warp's loads: four runs of 128 contiguous bytes) and that block's 16-byte head
// (d, dmin, 12 scale bytes; 8 lanes share the load). Piece p is chunk c = p / 2, half h = p % 2: its low
// nibbles are elements 16h .. 16h + 15 of sub-block 2c, its high nibbles the same elements of 2c + 1.
// Per sub-block j: d sc_j dx_j dot(nibbles, xq) - dmin m_j (sum of x over the lane's 16 inputs).
// The next super-blocks' weights are loaded before this one's products (two in flight per lane and row).
// Sums in a fixed order (lanes by shuffles, warps in order): the result does not depend on timing.

#define NIB 0x0F0F0F0Fu

// the lane's share of one row's super-block: head hd, quant piece qv; x pieces xa (sub-block 2c), xb (2c + 1)
__device__ __forceinline__ float piece_dot(uint4 hd, uint4 qv, int4 xa, int4 xb, float4 sa, float4 sb,
                                           int c, int h) {
  float dsc0, dmn0, dsc1, dmn1;
  q4k_scale(hd, 2 * c, dsc0, dmn0);
  q4k_scale(hd, 2 * c + 1, dsc1, dmn1);
  int lo = dp4a(qv.x & NIB, xa.x, 0);
  lo = dp4a(qv.y & NIB, xa.y, lo);
  lo = dp4a(qv.z & NIB, xa.z, lo);
  lo = dp4a(qv.w & NIB, xa.w, lo);
  int hi = dp4a((qv.x >> 4) & NIB, xb.x, 0);
  hi = dp4a((qv.y >> 4) & NIB, xb.y, hi);
  hi = dp4a((qv.z >> 4) & NIB, xb.z, hi);
  hi = dp4a((qv.w >> 4) & NIB, xb.w, hi);
  const float suma = h ? sa.z : sa.y, sumb = h ? sb.z : sb.y;
  return dsc0 * sa.x * (float)lo + dsc1 * sb.x * (float)hi - dmn0 * suma - dmn1 * sumb;
}

// Rows row0 .. row0 + R - 1 of W (rows past N: row N - 1, not stored): each lane's partial sums in acc[R]
__device__ __forceinline__ void q4k_rows(const uint4* __restrict__ w, const int4* __restrict__ xq,
                                         const float4* __restrict__ xs, int N, int nb, int row0, float* acc) {
  const int lane = threadIdx.x % LANES, warp = threadIdx.x / LANES;
  const int p = lane % 8, s = lane / 8, c = p / 2, h = p % 2;
  const long long row_pieces = (long long)nb * 9;  // 16-byte pieces per row
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wr[r] = w + (long long)min(row0 + r, N - 1) * row_pieces;
  uint4 hd[R], qv[R];
  int sb = 4 * warp + s;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    acc[r] = 0.f;
    if (sb < nb) {
      hd[r] = wr[r][sb * 9];
      qv[r] = wr[r][sb * 9 + 1 + p];
    }
  }
  wait_for_x();
  for (; sb < nb; sb += 4 * NW) {
    const int nx = sb + 4 * NW;
    uint4 hn[R], qn[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (nx < nb) {
        hn[r] = wr[r][nx * 9];
        qn[r] = wr[r][nx * 9 + 1 + p];
      }
    }
    const int4 xa = xq[sb * 16 + 4 * c + h], xb = xq[sb * 16 + 4 * c + 2 + h];
    const float4 sa = xs[sb * 8 + 2 * c], sb1 = xs[sb * 8 + 2 * c + 1];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      acc[r] += piece_dot(hd[r], qv[r], xa, xb, sa, sb1, c, h);
      hd[r] = hn[r];
      qv[r] = qn[r];
    }
  }
}

extern "C" __global__ void __launch_bounds__(NW * LANES) gemv_q4k_i8(
    const uint4* __restrict__ w, const int4* __restrict__ xq, const float4* __restrict__ xs,
    const void* __restrict__ bias, void* y, int N, int nb) {
  const int row0 = blockIdx.x * R;
  float acc[R];
  q4k_rows(w, xq, xs, N, nb, row0, acc);
  store_rows(acc, bias, y, N, row0);
}
