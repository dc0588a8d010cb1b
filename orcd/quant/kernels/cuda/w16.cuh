// The 16-bit-weight products' pieces (prepended after common.cuh by mmq_cuda.py): x's type (OUT_KIND 0:
// bf16, 1: fp16), the exponent that turns small integers in the low mantissa bits into MAGIC_VAL + q,
// two floats packed as one register, and the tensor-core product m16n8k16 with fp32 accumulation.

#if OUT_KIND == 0
#define MAGIC 0x43004300u  // bf16 (128, 128)
#define ONE2 0x3F803F80u   // (1.0, 1.0)
#define NEG2 0xC300C300u   // (-128, -128)
#define NEG2_32 0xC320C320u  // (-160, -160): -(128 + 32)
#define MMA_T "bf16"
#define FMA2 "fma.rn.bf16x2"
#else
#define MAGIC 0x64006400u  // fp16 (1024, 1024)
#define ONE2 0x3C003C00u   // (1.0, 1.0)
#define NEG2 0xE400E400u   // (-1024, -1024)
#define NEG2_32 0xE420E420u  // (-1056, -1056): -(1024 + 32)
#define MMA_T "f16"
#define FMA2 "fma.rn.f16x2"
#endif

// two floats as one register of two 16-bit floats of x's type (a in the low half)
__device__ __forceinline__ unsigned int pack2(float a, float b) {
  unsigned int r;
#if OUT_KIND == 0
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
#else
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
#endif
  return r;
}

__device__ __forceinline__ void mma_16(float* c, unsigned int a0, unsigned int a1, unsigned int a2,
                                       unsigned int a3, unsigned int b0, unsigned int b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_T "." MMA_T ".f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

