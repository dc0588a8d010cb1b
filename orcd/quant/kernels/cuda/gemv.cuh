// Pieces of the one-token GEMVs (gemv_q4k_i8.cu, gemv_q6k_i8.cu; prepended after scalars.cuh by
// gemv_cuda.py): the 4-way int8 dot product, the wait for x, and the rows' sums out.

#define LANES 32

__device__ __forceinline__ int dp4a(unsigned int a, int b, int c) {
  int d;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Before reading x (the previous kernel's output): with PDL, wait for that kernel, then let the next one
// start its own weight loads.
__device__ __forceinline__ void wait_for_x() {
#if PDL
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Rows row0 .. row0 + R - 1 (those < N) out: each lane's acc[r] summed over the warp by shuffles, the
// warps' sums in warp order through shared memory, + bias, + y's old value (RES), rounded once to y.
__device__ __forceinline__ void store_rows(const float* acc, const void* bias, void* y, int N, int row0) {
  const int lane = threadIdx.x % LANES, warp = threadIdx.x / LANES;
  __shared__ float red[NW][R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = acc[r];
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    if (lane == 0) red[warp][r] = v;
  }
  __syncthreads();
  const int row = row0 + threadIdx.x;
  if (threadIdx.x < R && row < N) {
    float v = 0.f;
    for (int k = 0; k < NW; ++k) v += red[k][threadIdx.x];
#if HAS_BIAS
    v += bias_at(bias, row);
#endif
#if RES
    v += out16_at(y, row);
#endif
    store_out(y, row, v);
  }
}
