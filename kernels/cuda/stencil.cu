// 2-D convolution of a float32 image with a 5 x 5 filter: the kernel the
// four-step tuning method (chapter "The four-step tuning method") is
// applied to, step by step, as in the source's image-convolution story.
//   out[y][x] = sum_{i,j} w[i][j] * in[y + i - R][x + j - R]   (zero outside)
// in and out are H x W, row-major. Argument order everywhere:
// in, w, out, H, W. Useful work: 2 * (2R + 1)^2 FLOP per output pixel.

#define R 2                   // filter radius: a (2R + 1) x (2R + 1) filter
#define KW (2 * R + 1)

__device__ __forceinline__ float pixel(const float* __restrict__ in, int H, int W, int y, int x)
{
    return (y >= 0 && y < H && x >= 0 && x < W) ? in[(long long)y * W + x] : 0.0f;
}

// --8<-- [start:conv_naive]
// Step 1, the baseline: one thread per output, a 1-D grid, the pixel found
// by division and modulo with consecutive threads going DOWN a column
// (y = i % H): a warp's 32 loads touch 32 different rows, 32 sectors for
// 128 useful bytes. The filter taps are not unrolled.
extern "C" __global__ void conv_naive(const float* __restrict__ in, const float* __restrict__ w,
                                      float* __restrict__ out, int H, int W)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)H * W) {
        return;
    }
    int y = (int)(i % H), x = (int)(i / H);  // column-major thread order
    float acc = 0.0f;
#pragma unroll 1
    for (int dy = -R; dy <= R; ++dy) {
#pragma unroll 1
        for (int dx = -R; dx <= R; ++dx) {
            acc += w[(dy + R) * KW + dx + R] * pixel(in, H, W, y + dy, x + dx);
        }
    }
    out[(long long)y * W + x] = acc;
}
// --8<-- [end:conv_naive]

// --8<-- [start:conv_coalesced]
// Step 2, the access pattern: the same kernel with consecutive threads along
// a row (x = i % W), so a warp reads 32 neighbouring floats of each row:
// 4 or 5 sectors per load instead of 32.
extern "C" __global__ void conv_coalesced(const float* __restrict__ in, const float* __restrict__ w,
                                          float* __restrict__ out, int H, int W)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)H * W) {
        return;
    }
    int x = (int)(i % W), y = (int)(i / W);  // row-major thread order
    float acc = 0.0f;
#pragma unroll 1
    for (int dy = -R; dy <= R; ++dy) {
#pragma unroll 1
        for (int dx = -R; dx <= R; ++dx) {
            acc += w[(dy + R) * KW + dx + R] * pixel(in, H, W, y + dy, x + dx);
        }
    }
    out[(long long)y * W + x] = acc;
}
// --8<-- [end:conv_coalesced]

// --8<-- [start:conv_tiled]
// Step 3, data reuse: each input pixel is used by 25 outputs. A block of
// BX x BY threads computes a BX x (BY * OUT) tile of outputs; it first loads
// the tile plus a halo of R pixels on each side into shared memory (each
// pixel read from global memory once per block), then every output reads
// its 25 inputs from shared memory. OUT > 1: each thread computes OUT
// outputs BY rows apart, so its 25 filter taps are loaded once per OUT
// outputs and the halo costs less per output.
// Step 4 (CONST_W = true): the filter from __constant__ memory (one
// broadcast per warp) instead of 25 global loads per thread; warp-wide rows
// (32 x 8 threads, 4 outputs each). Every instance, steps 3 and 4 alike,
// unrolls the 25 taps into FMAs with compile-time offsets into the tile and
// divides only by compile-time constants.
__constant__ float c_w[KW * KW];

template <int BX, int BY, int OUT, bool CONST_W>
__device__ void conv_tiled(const float* __restrict__ in, const float* __restrict__ w,
                           float* __restrict__ out, int H, int W)
{
    constexpr int TW = BX + 2 * R;            // tile width with halo
    constexpr int TH = BY * OUT + 2 * R;      // tile height with halo
    __shared__ float tile[TH][TW];
    const int x0 = blockIdx.x * BX, y0 = blockIdx.y * BY * OUT;
    const int tid = threadIdx.y * BX + threadIdx.x;
    // Cooperative load: consecutive threads take consecutive pixels of a
    // tile row (coalesced); / and % are by compile-time constants (shifts
    // and multiplies).
    for (int k = tid; k < TH * TW; k += BX * BY) {
        int ty = k / TW, tx = k % TW;
        tile[ty][tx] = pixel(in, H, W, y0 + ty - R, x0 + tx - R);
    }
    __syncthreads();  // the whole tile, halo included, before any output reads it
    float acc[OUT];
#pragma unroll
    for (int o = 0; o < OUT; ++o) {
        acc[o] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < KW; ++i) {
#pragma unroll
        for (int j = 0; j < KW; ++j) {
            const float wij = CONST_W ? c_w[i * KW + j] : w[i * KW + j];
#pragma unroll
            for (int o = 0; o < OUT; ++o) {
                acc[o] = fmaf(wij, tile[threadIdx.y + o * BY + i][threadIdx.x + j], acc[o]);
            }
        }
    }
    const int x = x0 + threadIdx.x;
#pragma unroll
    for (int o = 0; o < OUT; ++o) {
        const int y = y0 + threadIdx.y + o * BY;
        if (y < H && x < W) {
            out[(long long)y * W + x] = acc[o];
        }
    }
}
// --8<-- [end:conv_tiled]

// The instances the chapter measures: (BX, BY, OUT, CONST_W).
extern "C" __global__ void conv_tiled8(const float* __restrict__ in, const float* __restrict__ w,
                                       float* __restrict__ out, int H, int W)
{
    conv_tiled<8, 8, 1, false>(in, w, out, H, W);  // the source's 8 x 8 tile: 64 threads
}

extern "C" __global__ void conv_tiled16(const float* __restrict__ in, const float* __restrict__ w,
                                        float* __restrict__ out, int H, int W)
{
    conv_tiled<16, 16, 1, false>(in, w, out, H, W);
}

extern "C" __global__ void conv_tiled32(const float* __restrict__ in, const float* __restrict__ w,
                                        float* __restrict__ out, int H, int W)
{
    conv_tiled<32, 32, 1, false>(in, w, out, H, W);  // 1024 threads
}

extern "C" __global__ void conv_tiled16x4(const float* __restrict__ in, const float* __restrict__ w,
                                          float* __restrict__ out, int H, int W)
{
    conv_tiled<16, 16, 4, false>(in, w, out, H, W);  // the source's fix: 16 x 16, 4 outputs per thread
}

extern "C" __global__ void conv_tuned(const float* __restrict__ in, const float* __restrict__ w,
                                      float* __restrict__ out, int H, int W)
{
    conv_tiled<32, 8, 4, true>(in, w, out, H, W);  // step 4: warp-wide rows, constant filter
}
