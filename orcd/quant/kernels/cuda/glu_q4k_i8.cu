// One token's SwiGLU y[row] = silu(x . Wg[row]) * (x . Wu[row]) for Wg, Wu raw Q4_K (GGUF's blocks) and x
// from quantize_x, in y's 16-bit type (as gemv_int8.glu_q4k_i8: fp32 sums, silu and product, one rounding).
// A block owns R rows of both matrices: its 2R row streams (gate rows, then up rows) walk K together in
// q4k_streams' one loop, so a lane has both matrices' next weights in flight. Compiled after
// gemv_q4k_i8.cu (q4k_streams); defines NW, R, OUT_KIND, HAS_BIAS 0, RES 0, PDL.

extern "C" __global__ void __launch_bounds__(NW * LANES) glu_q4k_i8(
    const uint4* __restrict__ wg, const uint4* __restrict__ wu, const int4* __restrict__ xq,
    const float4* __restrict__ xs, void* y, int N, int nb) {
  const int row0 = blockIdx.x * R;
  const long long row_pieces = (long long)nb * 9;  // 16-byte pieces per row
  const uint4* wr[2 * R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const long long row = min(row0 + r, N - 1);
    wr[r] = wg + row * row_pieces;
    wr[R + r] = wu + row * row_pieces;
  }
  float acc[2 * R];
  q4k_streams<2 * R>(wr, xq, xs, nb, acc);
  __shared__ float red[NW][2 * R];
  warp_sums<2 * R>(acc, red);
  const int row = row0 + threadIdx.x;
  if (threadIdx.x < R && row < N) {
    const float g = block_sum<2 * R>(red, threadIdx.x), u = block_sum<2 * R>(red, R + threadIdx.x);
    store_out(y, row, g / (1.f + __expf(-g)) * u);
  }
}
