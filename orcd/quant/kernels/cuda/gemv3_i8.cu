// Attention's q, k, v of one token in one launch (as gemv3_int8.py's Triton kernel): blocks
// 0 .. ceil(Na / R) - 1 take rows of A, the next ceil(Nb / R) rows of B, the rest rows of C, all from the
// same quantized x. Each matrix Q4_K (GGUF's blocks) or split Q6_K by the defines QA, QB, QC (12 or 14;
// a Q4_K matrix's d pointer is never read); biases all present or all absent (HAS_BIAS). Compiled after
// gemv_q4k_i8.cu and gemv_q6k_i8.cu (their q4k_rows / q6k_rows); defines NW, R, OUT_KIND, RES 0, PDL.

#define ROWS_OF(QT, w, d, n, row0, acc)            \
  if (QT == 12) q4k_rows(w, xq, xs, n, nb, row0, acc); \
  else q6k_rows(w, d, xq, xs, n, nb, row0, acc)

extern "C" __global__ void __launch_bounds__(NW * LANES) gemv3_i8(
    const int4* __restrict__ xq, const float4* __restrict__ xs, int nb,
    const uint4* __restrict__ wa, const unsigned short* __restrict__ da, const void* __restrict__ ba, void* ya,
    int na, const uint4* __restrict__ wb, const unsigned short* __restrict__ db, const void* __restrict__ bb,
    void* yb, int nbr, const uint4* __restrict__ wc, const unsigned short* __restrict__ dc,
    const void* __restrict__ bc, void* yc, int nc) {
  const int blocks_a = (na + R - 1) / R, blocks_b = (nbr + R - 1) / R;
  float acc[R];
  int blk = blockIdx.x;
  if (blk < blocks_a) {
    ROWS_OF(QA, wa, da, na, blk * R, acc);
    store_rows(acc, ba, ya, na, blk * R);
  } else if (blk < blocks_a + blocks_b) {
    blk -= blocks_a;
    ROWS_OF(QB, wb, db, nbr, blk * R, acc);
    store_rows(acc, bb, yb, nbr, blk * R);
  } else {
    blk -= blocks_a + blocks_b;
    ROWS_OF(QC, wc, dc, nc, blk * R, acc);
    store_rows(acc, bc, yc, nc, blk * R);
  }
}
