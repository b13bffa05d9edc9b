// Integer Tensor Core instructions per architecture: the same PTX mma.sync
// with INT8 and with INT4 operands. tests/test_tensor_cores.py compiles this
// for each architecture and reads the SASS: which IMMA instruction each
// becomes (the Tensor Core chapter, "Integer formats").
// REQUIRES: sm_80
// REQUIRES: sm_86
// REQUIRES: sm_89
// REQUIRES: sm_90

// --8<-- [start:int_mma]
// D = A (16 x 32, s8) * B (32 x 8, s8) + D (16 x 8, s32), one warp
extern "C" __global__ void mma_s8(const unsigned* __restrict__ a, const unsigned* __restrict__ b, int* __restrict__ d) {
    const int lane = threadIdx.x % 32;
    int acc[4] = {0, 0, 0, 0};
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
                 : "r"(a[lane * 4]), "r"(a[lane * 4 + 1]), "r"(a[lane * 4 + 2]), "r"(a[lane * 4 + 3]),
                   "r"(b[lane * 2]), "r"(b[lane * 2 + 1]));
    for (int i = 0; i < 4; ++i) d[lane * 4 + i] = acc[i];
}

// D = A (16 x 64, s4) * B (64 x 8, s4) + D (16 x 8, s32), one warp: eight 4-bit values per register
extern "C" __global__ void mma_s4(const unsigned* __restrict__ a, const unsigned* __restrict__ b, int* __restrict__ d) {
    const int lane = threadIdx.x % 32;
    int acc[4] = {0, 0, 0, 0};
    asm volatile("mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
                 : "r"(a[lane * 4]), "r"(a[lane * 4 + 1]), "r"(a[lane * 4 + 2]), "r"(a[lane * 4 + 3]),
                   "r"(b[lane * 2]), "r"(b[lane * 2 + 1]));
    for (int i = 0; i < 4; ++i) d[lane * 4 + i] = acc[i];
}
// --8<-- [end:int_mma]
