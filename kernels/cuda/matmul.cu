// FP32 matrix multiplication C = A * B (chapter "Case study: matrix
// multiplication"). Row-major: A is M x K, B is K x N, C is M x N, any
// M, N, K >= 1 (every kernel guards its tails). Argument order everywhere:
// A, B, C, M, N, K. The wrapper (kernels/matmul.py) picks the grid and
// block of each step; indices fit in int because it rejects matrices of
// 2^31 elements or more.
//
// The ladder follows siboehm's SGEMM_CUDA (1_naive ... 10_warptiling):
// each step adds one idea and says what is still slow.

// --8<-- [start:matmul_naive]
// Step 1: one thread per output, straight from global memory. threadIdx.x
// walks down a COLUMN of C: the 32 threads of a warp read 32 different
// rows of A (32 sectors for 128 useful bytes) and write 32 rows of C.
extern "C" __global__ void matmul_naive(const float* __restrict__ A,
                                        const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads: consecutive rows
    int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}
// --8<-- [end:matmul_naive]

// --8<-- [start:matmul_coalesced]
// Step 2: the same work with threadIdx.x along a ROW of C. A warp now reads
// one value of A (a broadcast) and 32 consecutive values of B, and writes
// 32 consecutive values of C: every access is coalesced. Still slow: each
// multiply-add needs two loads (intensity 1/4 FLOP per byte of request);
// the caches, not the kernel, provide the reuse.
extern "C" __global__ void matmul_coalesced(const float* __restrict__ A,
                                            const float* __restrict__ B,
                                            float* __restrict__ C, int M, int N, int K)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads: consecutive columns
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}
// --8<-- [end:matmul_coalesced]

// --8<-- [start:matmul_smem_tiled]
// Step 3: shared-memory tiling. A TILE x TILE block of threads stages a
// tile of A and a tile of B in shared memory, then every thread reads TILE
// values of each from there: global traffic falls by a factor TILE. Out-of-
// range elements are loaded as zeros, so the tails need no special loop.
// Still slow: two shared-memory loads per FMA, and one output per thread.
template <int TILE>
__device__ __forceinline__ void smem_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();  // the tiles are complete before anyone reads them
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();  // everyone is done reading before the next tile overwrites them
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" __global__ void matmul_smem_tiled16(const float* __restrict__ A, const float* __restrict__ B,
                                               float* __restrict__ C, int M, int N, int K)
{
    smem_tiled<16>(A, B, C, M, N, K);
}

extern "C" __global__ void matmul_smem_tiled32(const float* __restrict__ A, const float* __restrict__ B,
                                               float* __restrict__ C, int M, int N, int K)
{
    smem_tiled<32>(A, B, C, M, N, K);
}
// --8<-- [end:matmul_smem_tiled]

// --8<-- [start:matmul_blocktile_1d]
// Step 4: 1D register blocking. A block of 512 threads computes a 64 x 64
// tile of C; each thread a column of TM = 8 outputs. The value of B it
// reads from shared memory is kept in a register and used TM times, so
// shared-memory loads per FMA fall from 2 to about 1.1. No bank conflicts:
// with BN = 64 the 32 threads of a warp share trow, so they read one
// address of As (a broadcast) and 32 consecutive words of Bs. Still slow:
// the A values are still one per FMA, nine shared values per eight FMAs
// (on average three load instructions: the compiler groups A's values
// into 16-byte loads).
namespace bt1 {
constexpr int BM = 64, BN = 64, BK = 8, TM = 8;
constexpr int THREADS = BM * BN / TM;  // 512
}

extern "C" __global__ void __launch_bounds__(bt1::THREADS)
matmul_blocktile_1d(const float* __restrict__ A, const float* __restrict__ B,
                    float* __restrict__ C, int M, int N, int K)
{
    using namespace bt1;
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tcol = threadIdx.x % BN, trow = threadIdx.x / BN;  // output column, group of TM rows
    // Each thread loads one element of each tile (BM*BK == BK*BN == THREADS).
    const int a_r = threadIdx.x / BK, a_c = threadIdx.x % BK;
    const int b_r = threadIdx.x / BN, b_c = threadIdx.x % BN;
    float acc[TM] = {0.0f};
    for (int k0 = 0; k0 < K; k0 += BK) {
        As[a_r * BK + a_c] = (m0 + a_r < M && k0 + a_c < K) ? A[(m0 + a_r) * K + k0 + a_c] : 0.0f;
        Bs[b_r * BN + b_c] = (k0 + b_r < K && n0 + b_c < N) ? B[(k0 + b_r) * N + n0 + b_c] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float b = Bs[k * BN + tcol];  // reused TM times from a register
#pragma unroll
            for (int i = 0; i < TM; ++i) acc[i] += As[(trow * TM + i) * BK + k] * b;
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        int row = m0 + trow * TM + i, col = n0 + tcol;
        if (row < M && col < N) C[row * N + col] = acc[i];
    }
}
// --8<-- [end:matmul_blocktile_1d]

// --8<-- [start:matmul_blocktile_2d]
// Step 5: 2D register blocking. 256 threads compute a 128 x 128 tile of C,
// each thread an 8 x 8 sub-tile: per k it loads TM values of A and TN of B
// into registers and does TM * TN = 64 FMAs with them (an outer product),
// so 16 shared loads feed 64 FMAs. Still slow: scalar global loads, and
// bank conflicts on B: the compiler merges each thread's reads into float4
// loads, and a warp's 16 column-threads read float4s 32 bytes apart, so
// every fourth of them falls in the same four banks. A is not the cause:
// ncu counts as many shared-load conflicts here as in step 6, whose A tile
// is transposed (and its B reads are the same); step 8 removes them.
namespace bt2 {
constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
constexpr int THREADS = (BM / TM) * (BN / TN);  // 256
}

extern "C" __global__ void __launch_bounds__(bt2::THREADS)
matmul_blocktile_2d(const float* __restrict__ A, const float* __restrict__ B,
                    float* __restrict__ C, int M, int N, int K)
{
    using namespace bt2;
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tcol = threadIdx.x % (BN / TN), trow = threadIdx.x / (BN / TN);
    float acc[TM][TN] = {{0.0f}};
    float a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        // BM*BK / THREADS = 4 elements of each tile per thread, coalesced along rows.
#pragma unroll
        for (int i = threadIdx.x; i < BM * BK; i += THREADS) {
            int r = i / BK, c = i % BK;
            As[i] = (m0 + r < M && k0 + c < K) ? A[(m0 + r) * K + k0 + c] : 0.0f;
        }
#pragma unroll
        for (int i = threadIdx.x; i < BK * BN; i += THREADS) {
            int r = i / BN, c = i % BN;
            Bs[i] = (k0 + r < K && n0 + c < N) ? B[(k0 + r) * N + n0 + c] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[(trow * TM + i) * BK + k];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k * BN + tcol * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            int row = m0 + trow * TM + i, col = n0 + tcol * TN + j;
            if (row < M && col < N) C[row * N + col] = acc[i][j];
        }
}
// --8<-- [end:matmul_blocktile_2d]

// --8<-- [start:tile_loaders]
// Steps 6-8 load tiles with float4 (16-byte) instructions. A tile whose
// every element is in range, and whose rows start 16-byte aligned, takes
// the fast path; a tail tile (at the matrix's edge, or K or N not a
// multiple of 4) is loaded element by element with zeros outside. The
// choice is the same for the whole block, so it costs no divergence.
__device__ __forceinline__ bool aligned16(const void* p)
{
    return (reinterpret_cast<unsigned long long>(p) & 15) == 0;
}

// Rows r0 .. r0+ROWS of a row-major matrix with `ld` columns, columns
// c0 .. c0+COLS, as float4s: thread t holds float4 number t, t+THREADS, ...
template <int ROWS, int COLS, int THREADS>
__device__ __forceinline__ void load_tile(const float* __restrict__ X, int rows, int cols, int ld,
                                          int r0, int c0, bool fast,
                                          float4 (&reg)[ROWS * COLS / 4 / THREADS])
{
    static_assert(ROWS * COLS % (4 * THREADS) == 0, "whole float4s per thread");
#pragma unroll
    for (int i = 0; i < ROWS * COLS / 4 / THREADS; ++i) {
        int idx = threadIdx.x + i * THREADS;
        int r = r0 + idx / (COLS / 4), c = c0 + (idx % (COLS / 4)) * 4;
        if (fast) {
            reg[i] = *reinterpret_cast<const float4*>(&X[r * ld + c]);
        } else {
            bool row_ok = r < rows;
            reg[i].x = (row_ok && c + 0 < cols) ? X[r * ld + c + 0] : 0.0f;
            reg[i].y = (row_ok && c + 1 < cols) ? X[r * ld + c + 1] : 0.0f;
            reg[i].z = (row_ok && c + 2 < cols) ? X[r * ld + c + 2] : 0.0f;
            reg[i].w = (row_ok && c + 3 < cols) ? X[r * ld + c + 3] : 0.0f;
        }
    }
}

// Is the tile at (r0, c0) of ROWS x COLS inside the matrix, with 16-byte
// aligned rows, so that load_tile may use float4 loads?
template <int ROWS, int COLS>
__device__ __forceinline__ bool tile_fast(const float* X, int rows, int cols, int r0, int c0, int ld)
{
    return r0 + ROWS <= rows && c0 + COLS <= cols && ld % 4 == 0 && aligned16(X);
}

// The A tile goes to shared memory transposed, As[k][m] (row length LDA),
// so that a thread's TM values of A for one k are contiguous (float4 reads).
template <int BM, int BK, int THREADS, int LDA>
__device__ __forceinline__ void store_a_transposed(float* As, const float4 (&reg)[BM * BK / 4 / THREADS])
{
#pragma unroll
    for (int i = 0; i < BM * BK / 4 / THREADS; ++i) {
        int idx = threadIdx.x + i * THREADS;
        int m = idx / (BK / 4), k = (idx % (BK / 4)) * 4;
        As[(k + 0) * LDA + m] = reg[i].x;
        As[(k + 1) * LDA + m] = reg[i].y;
        As[(k + 2) * LDA + m] = reg[i].z;
        As[(k + 3) * LDA + m] = reg[i].w;
    }
}

template <int BK, int BN, int THREADS>
__device__ __forceinline__ void store_b(float* Bs, const float4 (&reg)[BK * BN / 4 / THREADS])
{
#pragma unroll
    for (int i = 0; i < BK * BN / 4 / THREADS; ++i) {
        int idx = threadIdx.x + i * THREADS;
        reinterpret_cast<float4*>(Bs)[idx] = reg[i];  // Bs[k][n], the layout of B
    }
}
// --8<-- [end:tile_loaders]

// --8<-- [start:matmul_vectorized]
// Step 6: vectorized memory access. Global loads are float4 (a quarter of
// the load instructions), the A tile is stored transposed so that each
// thread reads its TM values of A for one k as two float4s, like its TN
// values of B. Still slow: every tile is loaded, then waited for behind a
// barrier, then computed: loads and math never overlap within a block.
namespace vec {
constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
constexpr int THREADS = (BM / TM) * (BN / TN);  // 256
constexpr int LDA = BM + 4;  // padding: the transposed stores hit different banks
}

extern "C" __global__ void __launch_bounds__(vec::THREADS)
matmul_vectorized(const float* __restrict__ A, const float* __restrict__ B,
                  float* __restrict__ C, int M, int N, int K)
{
    using namespace vec;
    __shared__ __align__(16) float As[BK * LDA];
    __shared__ __align__(16) float Bs[BK * BN];
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tcol = threadIdx.x % (BN / TN), trow = threadIdx.x / (BN / TN);
    float acc[TM][TN] = {{0.0f}};
    float4 ra[BM * BK / 4 / THREADS], rb[BK * BN / 4 / THREADS];
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_tile<BM, BK, THREADS>(A, M, K, K, m0, k0, tile_fast<BM, BK>(A, M, K, m0, k0, K), ra);
        load_tile<BK, BN, THREADS>(B, K, N, N, k0, n0, tile_fast<BK, BN>(B, K, N, k0, n0, N), rb);
        store_a_transposed<BM, BK, THREADS, LDA>(As, ra);
        store_b<BK, BN, THREADS>(Bs, rb);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            __align__(16) float a[TM];  // written as float4s: 16-byte aligned even if
            __align__(16) float b[TN];  // the compiler puts them in local memory
#pragma unroll
            for (int i = 0; i < TM; i += 4)
                *reinterpret_cast<float4*>(&a[i]) = *reinterpret_cast<const float4*>(&As[k * LDA + trow * TM + i]);
#pragma unroll
            for (int j = 0; j < TN; j += 4)
                *reinterpret_cast<float4*>(&b[j]) = *reinterpret_cast<const float4*>(&Bs[k * BN + tcol * TN + j]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();  // the next iteration overwrites the tiles
    }
    const bool fast_c = m0 + BM <= M && n0 + BN <= N && N % 4 == 0 && aligned16(C);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        int row = m0 + trow * TM + i, col = n0 + tcol * TN;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            if (fast_c) {
                *reinterpret_cast<float4*>(&C[row * N + col + j]) =
                    make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            } else {
#pragma unroll
                for (int jj = 0; jj < 4; ++jj)
                    if (row < M && col + j + jj < N) C[row * N + col + j + jj] = acc[i][j + jj];
            }
        }
    }
}
// --8<-- [end:matmul_vectorized]

// --8<-- [start:matmul_double_buffered]
// Step 7: double buffering (software pipelining). Two copies of each tile
// in shared memory: while the block computes on one, the next tile's
// global loads are already in flight into registers, and are stored into
// the other copy afterwards. One barrier per tile instead of two. Still
// slow: each thread's 8 x 8 outputs are 8 contiguous columns, so the
// float4 reads of B by a warp's 16 column-threads are 32 bytes apart
// (2-way bank conflicts), and the warp covers a tall, thin region.
extern "C" __global__ void __launch_bounds__(vec::THREADS)
matmul_double_buffered(const float* __restrict__ A, const float* __restrict__ B,
                       float* __restrict__ C, int M, int N, int K)
{
    using namespace vec;
    __shared__ __align__(16) float As[2][BK * LDA];
    __shared__ __align__(16) float Bs[2][BK * BN];
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tcol = threadIdx.x % (BN / TN), trow = threadIdx.x / (BN / TN);
    float acc[TM][TN] = {{0.0f}};
    float4 ra[BM * BK / 4 / THREADS], rb[BK * BN / 4 / THREADS];
    const int tiles = (K + BK - 1) / BK;
    load_tile<BM, BK, THREADS>(A, M, K, K, m0, 0, tile_fast<BM, BK>(A, M, K, m0, 0, K), ra);
    load_tile<BK, BN, THREADS>(B, K, N, N, 0, n0, tile_fast<BK, BN>(B, K, N, 0, n0, N), rb);
    store_a_transposed<BM, BK, THREADS, LDA>(As[0], ra);
    store_b<BK, BN, THREADS>(Bs[0], rb);
    __syncthreads();
    for (int t = 0; t < tiles; ++t) {
        const int cur = t & 1;
        const bool more = t + 1 < tiles;
        if (more) {  // issue the next tile's loads now; they complete while we compute
            int k0 = (t + 1) * BK;
            load_tile<BM, BK, THREADS>(A, M, K, K, m0, k0, tile_fast<BM, BK>(A, M, K, m0, k0, K), ra);
            load_tile<BK, BN, THREADS>(B, K, N, N, k0, n0, tile_fast<BK, BN>(B, K, N, k0, n0, N), rb);
        }
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            __align__(16) float a[TM];  // written as float4s: 16-byte aligned even if
            __align__(16) float b[TN];  // the compiler puts them in local memory
#pragma unroll
            for (int i = 0; i < TM; i += 4)
                *reinterpret_cast<float4*>(&a[i]) =
                    *reinterpret_cast<const float4*>(&As[cur][k * LDA + trow * TM + i]);
#pragma unroll
            for (int j = 0; j < TN; j += 4)
                *reinterpret_cast<float4*>(&b[j]) =
                    *reinterpret_cast<const float4*>(&Bs[cur][k * BN + tcol * TN + j]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        if (more) {
            // The other buffer was last read in iteration t-1, and every
            // thread has passed that iteration's barrier: safe to overwrite.
            store_a_transposed<BM, BK, THREADS, LDA>(As[cur ^ 1], ra);
            store_b<BK, BN, THREADS>(Bs[cur ^ 1], rb);
        }
        __syncthreads();  // the next tile is complete; this one is no longer read
    }
    const bool fast_c = m0 + BM <= M && n0 + BN <= N && N % 4 == 0 && aligned16(C);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        int row = m0 + trow * TM + i, col = n0 + tcol * TN;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            if (fast_c) {
                *reinterpret_cast<float4*>(&C[row * N + col + j]) =
                    make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            } else {
#pragma unroll
                for (int jj = 0; jj < 4; ++jj)
                    if (row < M && col + j + jj < N) C[row * N + col + j + jj] = acc[i][j + jj];
            }
        }
    }
}
// --8<-- [end:matmul_double_buffered]

// --8<-- [start:matmul_warptiled]
// Step 8: warp tiling. One more level between block and thread: each warp
// owns a WM x WN region of the block tile, and within it each thread owns
// TM x TN outputs as (TM/4) x (TN/4) float4-wide pieces spread WM/(TM/4)
// rows and WN/(TN/4) columns apart. A warp's float4 reads of A and of B
// are then consecutive 16-byte words (conflict-free, the rest broadcast),
// and its region is compact, so it touches fewer shared-memory words per
// FMA. Double buffered as step 7. Template parameters are the tuning knobs
// (kernels/bench/matmul.py sweeps them); matmul_warptiled below is the
// configuration the sweep chose on an H200.
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int THREADS, bool PREFETCH, bool SPLIT = false>
__device__ __forceinline__ void warptiled(const float* __restrict__ A, const float* __restrict__ B,
                                          float* __restrict__ C, int M, int N, int K,
                                          int ld_w = 0, int k_split = 0)
{
    // Block (x, y) computes the BM x BN tile (y, x) of C. With SPLIT, block
    // (x, y, z) covers only K's slice z, k in [z * k_split, min(K, (z + 1) *
    // k_split)), and writes its partial sums to plane z of C, a workspace of
    // M rows of ld_w floats per plane (matmul_splitk_t adds the planes).
    const int k_begin = SPLIT ? blockIdx.z * k_split : 0;
    const int k_end = SPLIT ? min(K, k_begin + k_split) : K;
    const int ldc = SPLIT ? ld_w : N;
    if (SPLIT) C += (size_t)blockIdx.z * M * ldc;
    constexpr int WARPS_N = BN / WN;                       // warps along a row of the block tile
    constexpr int LANES_M = WM / TM, LANES_N = WN / TN;    // lanes of a warp along M and N
    static_assert((BM / WM) * (BN / WN) * 32 == THREADS, "one warp per warp tile");
    static_assert(LANES_M * LANES_N == 32, "a warp tile covers 32 lanes");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "float4 pieces");
    constexpr int LDA = BM + 4;
    __shared__ __align__(16) float As[2][BK * LDA];
    __shared__ __align__(16) float Bs[2][BK * BN];

    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;  // warp tile in block tile
    const int lm = lane / LANES_N, ln = lane % LANES_N;                  // lane in warp tile
    // Output (i, j) of this thread: row wm0 + (i/4)*(LANES_M*4) + lm*4 + i%4,
    //                                col wn0 + (j/4)*(LANES_N*4) + ln*4 + j%4.
    float acc[TM][TN] = {{0.0f}};
    float4 ra[BM * BK / 4 / THREADS], rb[BK * BN / 4 / THREADS];
    const int tiles = (k_end - k_begin + BK - 1) / BK;
    load_tile<BM, BK, THREADS>(A, M, k_end, K, m0, k_begin, tile_fast<BM, BK>(A, M, k_end, m0, k_begin, K), ra);
    load_tile<BK, BN, THREADS>(B, k_end, N, N, k_begin, n0, tile_fast<BK, BN>(B, k_end, N, k_begin, n0, N), rb);
    store_a_transposed<BM, BK, THREADS, LDA>(As[0], ra);
    store_b<BK, BN, THREADS>(Bs[0], rb);
    __syncthreads();
    for (int t = 0; t < tiles; ++t) {
        const int cur = t & 1;
        const bool more = t + 1 < tiles;
        if (more) {
            int k0 = k_begin + (t + 1) * BK;
            load_tile<BM, BK, THREADS>(A, M, k_end, K, m0, k0, tile_fast<BM, BK>(A, M, k_end, m0, k0, K), ra);
            load_tile<BK, BN, THREADS>(B, k_end, N, N, k0, n0, tile_fast<BK, BN>(B, k_end, N, k0, n0, N), rb);
        }
        const float* as = As[cur] + wm0 + lm * 4;
        const float* bs = Bs[cur] + wn0 + ln * 4;
        // a[k & 1], b[k & 1]: this thread's TM values of A and TN of B at k.
        // With PREFETCH the loads for k + 1 are issued before the FMAs of k,
        // so shared-memory latency hides behind 64 FMAs (two register sets).
        // Written as float4s, so 16-byte aligned: the register-capped variants
        // (__launch_bounds__(128, 3 or 4)) place them in local memory.
        __align__(16) float a[PREFETCH ? 2 : 1][TM];
        __align__(16) float b[PREFETCH ? 2 : 1][TN];
        auto load_frag = [&](int k, int s) {
#pragma unroll
            for (int i = 0; i < TM; i += 4)
                *reinterpret_cast<float4*>(&a[s][i]) =
                    *reinterpret_cast<const float4*>(&as[k * LDA + (i / 4) * (LANES_M * 4)]);
#pragma unroll
            for (int j = 0; j < TN; j += 4)
                *reinterpret_cast<float4*>(&b[s][j]) =
                    *reinterpret_cast<const float4*>(&bs[k * BN + (j / 4) * (LANES_N * 4)]);
        };
        if (PREFETCH) load_frag(0, 0);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const int s = PREFETCH ? (k & 1) : 0;
            if (!PREFETCH) load_frag(k, 0);
            else if (k + 1 < BK) load_frag(k + 1, s ^ 1);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[s][i] * b[s][j];
        }
        if (more) {  // as in step 7: the other buffer is free since the last barrier
            store_a_transposed<BM, BK, THREADS, LDA>(As[cur ^ 1], ra);
            store_b<BK, BN, THREADS>(Bs[cur ^ 1], rb);
        }
        __syncthreads();
    }
    const bool fast_c = m0 + BM <= M && n0 + BN <= N && ldc % 4 == 0 && aligned16(C);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        int row = m0 + wm0 + (i / 4) * (LANES_M * 4) + lm * 4 + i % 4;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            int col = n0 + wn0 + (j / 4) * (LANES_N * 4) + ln * 4;
            if (fast_c) {
                *reinterpret_cast<float4*>(&C[row * ldc + col]) =
                    make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            } else {
#pragma unroll
                for (int jj = 0; jj < 4; ++jj)
                    if (row < M && col + jj < N) C[row * ldc + col + jj] = acc[i][j + jj];
            }
        }
    }
}

// The tuning sweep instantiates this template by name (CuPy name_expressions).
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int THREADS, int MIN_BLOCKS, bool PREFETCH>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_warptiled_t(const float* __restrict__ A, const float* __restrict__ B,
                   float* __restrict__ C, int M, int N, int K)
{
    warptiled<BM, BN, BK, WM, WN, TM, TN, THREADS, PREFETCH>(A, B, C, M, N, K);
}

// Step 8 as siboehm's ladder would ship it: 128 x 128 block tile, BK = 8,
// eight warps of 32 x 64, 8 x 8 outputs per thread; two blocks per SM (at
// most 128 registers). Still slow: with 128 registers there is no room to
// load the next k's fragments while the FMAs of this k run, so every warp
// waits on shared-memory latency (ncu: stalls on short scoreboard).
namespace wt {
constexpr int BM = 128, BN = 128, BK = 8, WM = 32, WN = 64, TM = 8, TN = 8, THREADS = 256;
}

extern "C" __global__ void __launch_bounds__(wt::THREADS, 2)
matmul_warptiled(const float* __restrict__ A, const float* __restrict__ B,
                 float* __restrict__ C, int M, int N, int K)
{
    using namespace wt;
    warptiled<BM, BN, BK, WM, WN, TM, TN, THREADS, false>(A, B, C, M, N, K);
}
// --8<-- [end:matmul_warptiled]

// --8<-- [start:matmul_register_prefetch]
// Step 9: register double buffering (PREFETCH = true): the fragments for
// k + 1 are loaded while the FMAs of k run, in a second set of registers.
// Still slow: the tile shape was chosen for another GPU; BK = 8 means a
// barrier every 8 k, and 256 threads x 128 registers leave no headroom.
extern "C" __global__ void __launch_bounds__(wt::THREADS, 2)
matmul_register_prefetch(const float* __restrict__ A, const float* __restrict__ B,
                         float* __restrict__ C, int M, int N, int K)
{
    using namespace wt;
    warptiled<BM, BN, BK, WM, WN, TM, TN, THREADS, true>(A, B, C, M, N, K);
}
// --8<-- [end:matmul_register_prefetch]

// --8<-- [start:matmul_autotuned]
// Step 10: the same template at the tile shape a sweep of 96 configurations
// chose on an H200 (kernels/bench/matmul.py, topic matmul, tuning records):
// 128 x 128 x 16 block tile, 4 warps of 32 x 128, 8 x 16 outputs per thread
// (up to 255 registers, two blocks per SM), fragments prefetched. Twice the
// outputs per thread halves the shared-memory loads per FMA; BK = 16 halves
// the barriers. What is left: FP32 FMAs on CUDA cores; the next step is
// Tensor Cores (TF32, FP16, BF16), chapter "Tensor Cores".
namespace at {
constexpr int BM = 128, BN = 128, BK = 16, WM = 32, WN = 128, TM = 8, TN = 16, THREADS = 128;
}

extern "C" __global__ void __launch_bounds__(at::THREADS, 2)
matmul_autotuned(const float* __restrict__ A, const float* __restrict__ B,
                 float* __restrict__ C, int M, int N, int K)
{
    using namespace at;
    warptiled<BM, BN, BK, WM, WN, TM, TN, THREADS, true>(A, B, C, M, N, K);
}
// --8<-- [end:matmul_autotuned]

// --8<-- [start:matmul_shapes]
// Shape-aware dispatch (kernels/matmul.py: plan, matmul): the step-10
// template, matmul_warptiled_t, at any of a few tile sizes, and this kernel
// when K is split over blockIdx.z because the tiles alone are too few to
// fill the SMs. Each slice writes its partial sums to its own plane of a
// workspace W (M rows of ldw floats); the last block of a tile to finish
// (a counter per tile, atomicAdd) adds the planes in the order z = 0, 1, ...
// (the same sum whichever block arrives last) into C and sets the counter
// back to 0 for the next call.
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int THREADS, int MIN_BLOCKS>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
matmul_splitk_t(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                int M, int N, int K, int k_split, float* __restrict__ W, int* __restrict__ tile_count)
{
    const int splits = gridDim.z;
    const int ldw = (N + 3) / 4 * 4;  // 16-byte rows: float4 stores and loads
    warptiled<BM, BN, BK, WM, WN, TM, TN, THREADS, true, true>(A, B, W, M, N, K, ldw, k_split);
    __shared__ int last;
    __syncthreads();  // every thread's partial sums written before thread 0 counts the block
    const int tile = blockIdx.y * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0) {
        // One atomic add with acquire-release semantics at GPU scope (the PTX memory
        // model's documented form; a relaxed atomicAdd after __threadfence only works
        // by how today's hardware happens to behave). Release: the block's partial sums
        // (ordered before it by the barrier above; release is cumulative) are published
        // with the count. Acquire: the block that counts last sees every other block's.
        int before;
        asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;"
                     : "=r"(before) : "l"(&tile_count[tile]) : "memory");
        last = before == splits - 1;
        if (last) tile_count[tile] = 0;  // for the next call (a kernel boundary orders it)
    }
    __syncthreads();  // the acquire passes on to the whole block
    if (!last) return;
    const size_t plane = (size_t)M * ldw;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const bool c_vec = N % 4 == 0 && aligned16(C);
    for (int q = threadIdx.x; q < BM * BN / 4; q += THREADS) {
        const int r = m0 + q / (BN / 4), c = n0 + (q % (BN / 4)) * 4;
        if (r >= M || c >= N) continue;
        float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int z = 0; z < splits; ++z) {  // __ldcg: from L2, where the other blocks' stores are
            float4 w = __ldcg(reinterpret_cast<const float4*>(&W[z * plane + (size_t)r * ldw + c]));
            s.x += w.x; s.y += w.y; s.z += w.z; s.w += w.w;
        }
        if (c_vec && c + 4 <= N) {
            *reinterpret_cast<float4*>(&C[(size_t)r * N + c]) = s;
        } else {
            const float v[4] = {s.x, s.y, s.z, s.w};
            for (int j = 0; j < 4 && c + j < N; ++j) C[(size_t)r * N + c + j] = v[j];
        }
    }
}
// --8<-- [end:matmul_shapes]

// --8<-- [start:source_001]
// Source 001's three matmul kernels, as it prints them (only extern "C"
// added, so CuPy finds them by name). Square N x N matrices, a 32 x 32
// block of threads, one output per thread. None of them checks bounds:
// matMulShared and matMulILP are correct only when N is a multiple of 32
// (the wrapper refuses other N). matMulILP is matMulShared with the k loop
// split into four partial sums, four independent FMA chains per thread.
extern "C" __global__ void matMulNaive(float* A, float* B, float* C, int N) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;

    float sum = 0.0f;
    for (int k = 0; k < N; k++) {
        sum += A[row * N + k] * B[k * N + col];
    }
    C[row * N + col] = sum;
}

extern "C" __global__ void matMulShared(float* A, float* B, float* C, int N) {
    __shared__ float tileA[32][32];
    __shared__ float tileB[32][32];

    int row = blockIdx.y * 32 + threadIdx.y;
    int col = blockIdx.x * 32 + threadIdx.x;

    float sum = 0.0f;
    for (int t = 0; t < (N + 31) / 32; t++) {
        tileA[threadIdx.y][threadIdx.x] = A[row * N + (t * 32 + threadIdx.x)];
        tileB[threadIdx.y][threadIdx.x] = B[(t * 32 + threadIdx.y) * N + col];
        __syncthreads();

        for (int k = 0; k < 32; k++) {
            sum += tileA[threadIdx.y][k] * tileB[k][threadIdx.x];
        }
        __syncthreads();
    }
    C[row * N + col] = sum;
}

extern "C" __global__ void matMulILP(float* A, float* B, float* C, int N) {
    __shared__ float tileA[32][32];
    __shared__ float tileB[32][32];

    int row = blockIdx.y * 32 + threadIdx.y;
    int col = blockIdx.x * 32 + threadIdx.x;

    float sum0 = 0.0f, sum1 = 0.0f, sum2 = 0.0f, sum3 = 0.0f;

    for (int t = 0; t < (N + 31) / 32; t++) {
        tileA[threadIdx.y][threadIdx.x] = A[row * N + (t * 32 + threadIdx.x)];
        tileB[threadIdx.y][threadIdx.x] = B[(t * 32 + threadIdx.y) * N + col];
        __syncthreads();

        // unrolled: four independent partial sums (the source's "ILP 4x")
        #pragma unroll
        for (int k = 0; k < 32; k += 4) {
            sum0 += tileA[threadIdx.y][k] * tileB[k][threadIdx.x];
            sum1 += tileA[threadIdx.y][k+1] * tileB[k+1][threadIdx.x];
            sum2 += tileA[threadIdx.y][k+2] * tileB[k+2][threadIdx.x];
            sum3 += tileA[threadIdx.y][k+3] * tileB[k+3][threadIdx.x];
        }
        __syncthreads();
    }
    C[row * N + col] = sum0 + sum1 + sum2 + sum3;
}
// --8<-- [end:source_001]
