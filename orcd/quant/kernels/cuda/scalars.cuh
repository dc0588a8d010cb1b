// Scalar helpers of the CUDA-C kernels (prepended first to each source by mmq_cuda.py and gemv_cuda.py):
// fp16 bits to float, the bias and the output store by OUT_KIND, Q4_K's 6-bit scales and mins.

__device__ __forceinline__ float half_to_float(unsigned int bits) {
  float f;
  unsigned short h = (unsigned short)bits;
  asm("{ .reg .f16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
  return f;
}

// p[i] as float, p holding values of the output's 16-bit type (OUT_KIND 0: bf16, 1: fp16)
__device__ __forceinline__ float out16_at(const void* p, long long i) {
  const unsigned int h = ((const unsigned short*)p)[i];
#if OUT_KIND == 0
  return __uint_as_float(h << 16);
#else
  return half_to_float(h);
#endif
}

// bias[row] as float: HAS_BIAS 1 a float32 bias, 2 one in the output's type (OUT_KIND), read as it is (a
// bf16 model's own bias: no float32 copy made each call)
__device__ __forceinline__ float bias_at(const void* bias, int row) {
#if HAS_BIAS == 2
  return out16_at(bias, row);
#else
  return ((const float*)bias)[row];
#endif
}

// y[i] = v rounded to the output's type (OUT_KIND 0: bf16, 1: fp16)
__device__ __forceinline__ void store_out(void* y, long long i, float v) {
  unsigned short h;
#if OUT_KIND == 0
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
#else
  asm("{ .reg .f16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(v));
#endif
  ((unsigned short*)y)[i] = h;
}

// byte i (0..11) of a block's scales, held in the header words s0, s1, s2 (bytes 4..15 of the block)
__device__ __forceinline__ unsigned int scale_byte(unsigned int s0, unsigned int s1, unsigned int s2, int i) {
  unsigned int w = i < 4 ? s0 : (i < 8 ? s1 : s2);
  return (w >> (8 * (i & 3))) & 255u;
}

// d * sc_j and dmin * m_j of sub-block j (ggml's get_scale_min_k4) from the 16-byte header h
__device__ __forceinline__ void q4k_scale(uint4 h, int j, float& dsc, float& dmn) {
  unsigned int sc, mn;
  if (j < 4) {
    sc = scale_byte(h.y, h.z, h.w, j) & 63u;
    mn = scale_byte(h.y, h.z, h.w, j + 4) & 63u;
  } else {
    unsigned int a = scale_byte(h.y, h.z, h.w, j + 4);
    sc = (a & 15u) | ((scale_byte(h.y, h.z, h.w, j - 4) >> 6) << 4);
    mn = (a >> 4) | ((scale_byte(h.y, h.z, h.w, j) >> 6) << 4);
  }
  dsc = half_to_float(h.x & 0xFFFFu) * (float)sc;
  dmn = half_to_float(h.x >> 16) * (float)mn;
}
