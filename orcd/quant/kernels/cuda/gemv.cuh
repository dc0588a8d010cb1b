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

// Each lane's acc[S] summed over its warp by shuffles into red[warp][s], the block synchronized after.
template <int S>
__device__ __forceinline__ void warp_sums(const float* acc, float (*red)[S]) {
  const int lane = threadIdx.x % LANES, warp = threadIdx.x / LANES;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    float v = acc[s];
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    if (lane == 0) red[warp][s] = v;
  }
  __syncthreads();
}

// Sum s of the block: the warps' sums added in warp order (the result does not depend on timing).
template <int S>
__device__ __forceinline__ float block_sum(float (*red)[S], int s) {
  float v = 0.f;
  for (int k = 0; k < NW; ++k) v += red[k][s];
  return v;
}

// Rows row0 .. row0 + R - 1 (those < N) out: each lane's acc[r] summed over the block (warp_sums,
// block_sum), + bias, + y's old value (RES), rounded once to y.
__device__ __forceinline__ void store_rows(const float* acc, const void* bias, void* y, int N, int row0) {
  __shared__ float red[NW][R];
  warp_sums<R>(acc, red);
  const int row = row0 + threadIdx.x;
  if (threadIdx.x < R && row < N) {
    float v = block_sum<R>(red, threadIdx.x);
#if HAS_BIAS
    v += bias_at(bias, row);
#endif
#if RES
    v += out16_at(y, row);
#endif
    store_out(y, row, v);
  }
}
