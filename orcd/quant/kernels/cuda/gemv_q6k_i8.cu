// One token's product y[row] = sum_k W[row, k] x[k] (+ bias, + y's old value where RES) for W Q6_K in
// layout.split_q6_k's layout (each block's 208 bytes ql | qh | scales 16-byte aligned, the d's fp16 apart
// in dt) and x as xquant.quantize_x writes it. Defines: NW warps, R rows per block, OUT_KIND, HAS_BIAS,
// RES, PDL.
//
// A block owns R rows; its NW warps take K's super-blocks eight at a time in turn. Lane (s = lane / 4,
// t = lane % 4) takes a quarter of super-block s: half n = t / 2 (elements 128n ..), offset l0 = 16 (t % 2),
// and from it the 16-byte pieces ql[64n + l0 ..], ql[64n + 32 + l0 ..], qh[32n + l0 ..] and the block's 16
// scales (4 lanes share that load): 64 weights, elements 128n + 32g + l0 + i for g = 0..3, i = 0..15, with
// q = (ql nibble) | (2 qh bits) << 4 in 0..63 and scale sc[8n + 2g + t % 2]. Per 16-element group:
// d sc (dx dot(q, xq) - 32 sum(x)), the dot one dp4a per 4 weights.
// The next super-blocks' weights are loaded before this one's products. Sums in a fixed order.

#define LOW4 0x0F0F0F0Fu
#define HI2 0x30303030u

// dot of the four 16-weight groups' words with x: qa, qb the two ql pieces, qh the high bits
__device__ __forceinline__ int group_dot(unsigned int qa, unsigned int qb, unsigned int qh, int g, int xw,
                                         int acc) {
  unsigned int q;
  if (g == 0) q = (qa & LOW4) | ((qh << 4) & HI2);
  else if (g == 1) q = (qb & LOW4) | ((qh << 2) & HI2);
  else if (g == 2) q = ((qa >> 4) & LOW4) | (qh & HI2);
  else q = ((qb >> 4) & LOW4) | ((qh >> 2) & HI2);
  return dp4a(q, xw, acc);
}

// signed byte b (0..3) of word w
__device__ __forceinline__ float sbyte(unsigned int w, int b) {
  return (float)((int)(w << (24 - 8 * b)) >> 24);
}

// the lane's share of one row's super-block: pieces qa, qb, qh, the block's scales sc, its d; xq, xs this
// lane's first x piece and first (dx, sums) group in the super-block (groups g at xq[2g], xs[g])
__device__ __forceinline__ float quarter_dot(uint4 qa, uint4 qb, uint4 qh, uint4 sc, float d,
                                             const int4* __restrict__ xq, const float4* __restrict__ xs,
                                             int n, int h) {
  const unsigned int wa = n ? sc.z : sc.x, wb = n ? sc.w : sc.y;  // scales 8n .. 8n + 3, 8n + 4 .. 8n + 7
  float sum = 0.f;
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const int4 xv = xq[2 * g];
    int v = group_dot(qa.x, qb.x, qh.x, g, xv.x, 0);
    v = group_dot(qa.y, qb.y, qh.y, g, xv.y, v);
    v = group_dot(qa.z, qb.z, qh.z, g, xv.z, v);
    v = group_dot(qa.w, qb.w, qh.w, g, xv.w, v);
    const float4 s = xs[g];
    const float scale = sbyte(g < 2 ? wa : wb, 2 * (g % 2) + h);  // sc[8n + 2g + h]
    sum += scale * (s.x * (float)v - 32.f * (h ? s.z : s.y));
  }
  return d * sum;
}

// The lane's pieces of one row's super-block sb (wr: the row's blocks, dr: its d's): ql at 64n + 16h and
// 64n + 32 + 16h, qh at 32n + 16h, the 16 scales, the d's bits
__device__ __forceinline__ void load_quarter(const uint4* __restrict__ wr, const unsigned short* __restrict__ dr,
                                             int sb, int n, int h, uint4& qa, uint4& qb, uint4& qh, uint4& sc,
                                             unsigned int& d) {
  const uint4* b = wr + sb * 13;  // 13 16-byte pieces a block
  qa = b[4 * n + h];
  qb = b[4 * n + 2 + h];
  qh = b[8 + 2 * n + h];
  sc = b[12];
  d = dr[sb];
}

// Rows row0 .. row0 + R - 1 of W (rows past N: row N - 1, not stored): each lane's partial sums in acc[R]
__device__ __forceinline__ void q6k_rows(const uint4* __restrict__ w, const unsigned short* __restrict__ dt,
                                         const int4* __restrict__ xq, const float4* __restrict__ xs, int N,
                                         int nb, int row0, float* acc) {
  const int lane = threadIdx.x % LANES, warp = threadIdx.x / LANES;
  const int s = lane / 4, t = lane % 4, n = t / 2, h = t % 2;
  const uint4* wr[R];
  const unsigned short* dr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const long long row = min(row0 + r, N - 1);
    wr[r] = w + row * nb * 13;
    dr[r] = dt + row * nb;
  }
  uint4 qa[R], qb[R], qh[R], sc[R];
  unsigned int dh[R];
  int sb = 8 * warp + s;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    acc[r] = 0.f;
    if (sb < nb) load_quarter(wr[r], dr[r], sb, n, h, qa[r], qb[r], qh[r], sc[r], dh[r]);
  }
  wait_for_x();
  for (; sb < nb; sb += 8 * NW) {
    const int nx = sb + 8 * NW;
    uint4 na[R], nb_[R], nh[R], ns[R];
    unsigned int nd[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (nx < nb) load_quarter(wr[r], dr[r], nx, n, h, na[r], nb_[r], nh[r], ns[r], nd[r]);
    }
    const int4* xp = xq + sb * 16 + 8 * n + h;  // element 256 sb + 128 n + 16 h, in 16-byte pieces
    const float4* sp = xs + sb * 8 + 4 * n;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      acc[r] += quarter_dot(qa[r], qb[r], qh[r], sc[r], half_to_float(dh[r]), xp, sp, n, h);
      qa[r] = na[r];
      qb[r] = nb_[r];
      qh[r] = nh[r];
      sc[r] = ns[r];
      dh[r] = nd[r];
    }
  }
}

extern "C" __global__ void __launch_bounds__(NW * LANES) gemv_q6k_i8(
    const uint4* __restrict__ w, const unsigned short* __restrict__ dt, const int4* __restrict__ xq,
    const float4* __restrict__ xs, const void* __restrict__ bias, void* y, int N, int nb) {
  const int row0 = blockIdx.x * R;
  float acc[R];
  q6k_rows(w, dt, xq, xs, N, nb, row0, acc);
  store_rows(acc, bias, y, N, row0);
}
