// Matrix transpose in float32 (chapter "Memory hierarchy and memory
// optimization", shared memory). `in` is rows x cols, row-major; `out` is
// cols x rows, row-major: out[c * rows + r] = in[r * cols + c]. Any rows,
// cols >= 1: every kernel guards its loads and its stores. Argument order
// everywhere: in, out, rows, cols. Indices fit in int because the wrapper
// (kernels/transpose.py) rejects matrices of 2^31 elements or more.
//
// The ladder follows NVIDIA's "An Efficient Matrix Transpose in CUDA C/C++"
// (Mark Harris): naive, then a shared-memory tile, then the tile padded
// against bank conflicts; step 4 goes on for an H200 (wider accesses, more
// bytes in flight per thread). copy_tiled is that post's yardstick: the
// same tiles moved without transposing. Bandwidth of every kernel counts
// bytes read + written, 2 * rows * cols * 4.

// --8<-- [start:transpose_naive]
// Step 1: one thread per element; reads coalesced, but each warp's store touches 32 sectors.
// A warp reads 32 consecutive floats of a row of `in` (one 128-byte line)
// and writes them down a column of `out`, `rows` floats apart: 32 sectors
// of 32 bytes written for 128 useful bytes. Launch 32 x 8 threads a block.
extern "C" __global__ void transpose_naive(const float* __restrict__ in, float* __restrict__ out,
                                           int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads: consecutive columns of in
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {  // the grid is rounded up to whole blocks
        out[c * rows + r] = in[r * cols + c];
    }
}
// --8<-- [end:transpose_naive]

// --8<-- [start:transpose_smem]
// Step 2: a 32 x 32 tile in shared memory makes the writes coalesced too; still slow: 32-way bank conflicts.
// A block of TILE x ROWS threads reads a TILE x TILE tile of `in` row by
// row (each thread TILE / ROWS = 4 elements), and writes it to `out` row
// by row from the tile's columns. Reading a column of tile[32][32] hits
// one bank 32 times: each such warp read is served in 32 passes.
constexpr int TILE = 32;  // the tile is TILE x TILE floats
constexpr int ROWS = 8;   // a block is TILE x ROWS threads

extern "C" __global__ void transpose_smem(const float* __restrict__ in, float* __restrict__ out,
                                          int rows, int cols)
{
    __shared__ float tile[TILE][TILE];
    int c = blockIdx.x * TILE + threadIdx.x;
    int r = blockIdx.y * TILE + threadIdx.y;
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {  // a warp reads one 128-byte line of a row of in
        if (r + j < rows && c < cols) tile[threadIdx.y + j][threadIdx.x] = in[(r + j) * cols + c];
    }
    __syncthreads();  // the whole tile is written before any thread reads it
    // Block (x, y) of in is block (y, x) of out: swap the block indices.
    c = blockIdx.y * TILE + threadIdx.x;  // column of out = row of in
    r = blockIdx.x * TILE + threadIdx.y;  // row of out = column of in
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        // The guard is the load's guard seen from out: an element is only
        // read from the tile if it was loaded into it.
        if (r + j < cols && c < rows) out[(r + j) * rows + c] = tile[threadIdx.x][threadIdx.y + j];
    }
}
// --8<-- [end:transpose_smem]

// --8<-- [start:transpose_padded]
// Step 3: pad the tile to [32][33]: column reads are conflict-free; still slow: 4 floats in flight per thread.
// Element (i, j) sits in bank (i * 33 + j) % 32 = (i + j) % 32: the 32
// floats of a column now fall in 32 different banks. What is left: each
// thread has only TILE / ROWS = 4 loads of 4 bytes in flight before the
// barrier, and every access is 4 bytes wide.
extern "C" __global__ void transpose_padded(const float* __restrict__ in, float* __restrict__ out,
                                            int rows, int cols)
{
    __shared__ float tile[TILE][TILE + 1];  // + 1: rows start one bank apart
    int c = blockIdx.x * TILE + threadIdx.x;
    int r = blockIdx.y * TILE + threadIdx.y;
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        if (r + j < rows && c < cols) tile[threadIdx.y + j][threadIdx.x] = in[(r + j) * cols + c];
    }
    __syncthreads();
    c = blockIdx.y * TILE + threadIdx.x;
    r = blockIdx.x * TILE + threadIdx.y;
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        if (r + j < cols && c < rows) out[(r + j) * rows + c] = tile[threadIdx.x][threadIdx.y + j];
    }
}
// --8<-- [end:transpose_padded]

// --8<-- [start:vector_helpers]
// Step 4's pieces. VEC consecutive floats as one access: float4 (16 bytes),
// float2 or float; the caller guarantees VEC * 4-byte alignment.
template <int VEC>
__device__ __forceinline__ void load_vec(const float* p, float (&v)[VEC])
{
    if constexpr (VEC == 4) {
        float4 t = *reinterpret_cast<const float4*>(p);
        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
    } else if constexpr (VEC == 2) {
        float2 t = *reinterpret_cast<const float2*>(p);
        v[0] = t.x; v[1] = t.y;
    } else {
        v[0] = *p;
    }
}

template <int VEC>
__device__ __forceinline__ void store_vec(float* p, const float (&v)[VEC])
{
    if constexpr (VEC == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (VEC == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
    } else {
        *p = v[0];
    }
}

template <int VEC>
__device__ __forceinline__ bool aligned(const void* p)
{
    return (reinterpret_cast<unsigned long long>(p) & (4 * VEC - 1)) == 0;
}

// Where chunk `chunk` (VEC floats) of row q of a shared tile is stored:
// XOR-swizzled by row. A warp's VEC-wide shared access is served 32 / VEC
// lanes at a time (a 128-byte pass); the lanes of a pass touch either one
// row (chunks 0, 1, 2, ...) or rows VEC apart at one chunk, and the XOR
// sends both kinds to 32 / VEC different chunk slots: no bank conflict,
// and no padding (a one-float pad would break the 16-byte alignment of
// float4; a four-float pad keeps it but costs shared memory).
template <int VEC>
__device__ __forceinline__ int swizzle(unsigned q, unsigned chunk)
{
    return chunk ^ ((q / VEC) % (32 / VEC));  // unsigned: / and % are a shift and a mask
}
// --8<-- [end:vector_helpers]

// --8<-- [start:transpose_coarsened]
// Step 4: coarsened: float4, 16 elements per thread, all loads in flight at once; left: a tiled copy's cost.
// A TILE x TILE tile, (TILE / VEC) x RY threads. Thread (tx, ty) owns
// K = TILE / (VEC * RY) micro-tiles of VEC x VEC floats: tile rows
// VEC * (ty + k * RY) + u, columns VEC * tx + v. It issues all K * VEC of
// its VEC-wide loads before using any (at 64 x 16 x 4: four 16-byte loads,
// 64 bytes in flight per thread against step 3's 16), and a warp still
// reads whole 128-byte lines. The micro-tile is transposed in registers
// (free: only which register goes where changes) and stored as VEC-float
// chunks of the transposed tile; the write phase reads rows of chunks back
// and stores them VEC-wide and coalesced. A 64-wide tile also writes 256
// contiguous bytes per row of out instead of 128. What is left is the
// cost of moving tiles at all: compare with copy_tiled below.
// TRANSPOSE = false is copy_tiled: the same accesses, nothing transposed.
template <int TILE, int RY, int VEC, bool TRANSPOSE>
__device__ __forceinline__ void tile_move(const float* __restrict__ in, float* __restrict__ out,
                                          int rows, int cols)
{
    constexpr int TX = TILE / VEC;  // threads along a tile row, VEC columns each
    constexpr int K = TX / RY;       // micro-tiles per thread, VEC * RY rows apart
    static_assert(TILE % 32 == 0 && (VEC == 1 || VEC == 2 || VEC == 4) && TX % RY == 0,
                  "TILE a multiple of 32, VEC 1, 2 or 4, RY dividing TILE / VEC");
    __shared__ __align__(16) float tile[TILE * TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;   // the tile's corner in in
    const int out_rows = TRANSPOSE ? cols : rows, out_cols = TRANSPOSE ? rows : cols;
    const int o_r0 = TRANSPOSE ? c0 : r0, o_c0 = TRANSPOSE ? r0 : c0;  // and in out
    // VEC-wide accesses need the whole tile inside and VEC-aligned rows;
    // otherwise (tail tiles, odd widths, offset views) one float at a time.
    // The choice is the same for the whole block: no divergence.
    const bool inside = r0 + TILE <= rows && c0 + TILE <= cols;
    const bool fast_in = inside && cols % VEC == 0 && aligned<VEC>(in);
    const bool fast_out = inside && out_cols % VEC == 0 && aligned<VEC>(out);

    // 1. Load: a[k][u][v] = in(r0 + VEC * (ty + k * RY) + u, c0 + VEC * tx + v).
    float a[K][VEC][VEC];
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int u = 0; u < VEC; ++u) {
            const int r = r0 + VEC * (ty + k * RY) + u, c = c0 + VEC * tx;
            if (fast_in) {
                load_vec<VEC>(&in[r * cols + c], a[k][u]);
            } else {  // zeros outside: no shared element is left unwritten
#pragma unroll
                for (int v = 0; v < VEC; ++v)
                    a[k][u][v] = (r < rows && c + v < cols) ? in[r * cols + c + v] : 0.0f;
            }
        }
    }
    // 2. Registers to shared memory, one VEC-float chunk per store. The tile
    //    is laid out as out sees it: row q of it is row o_r0 + q of out.
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int w = 0; w < VEC; ++w) {
            float b[VEC];
            int q, chunk;
            if constexpr (TRANSPOSE) {  // column w of the micro-tile is a piece of row VEC * tx + w of out
                q = VEC * tx + w;
                chunk = ty + k * RY;
#pragma unroll
                for (int u = 0; u < VEC; ++u) b[u] = a[k][u][w];
            } else {
                q = VEC * (ty + k * RY) + w;
                chunk = tx;
#pragma unroll
                for (int u = 0; u < VEC; ++u) b[u] = a[k][w][u];
            }
            store_vec<VEC>(&tile[q * TILE + VEC * swizzle<VEC>(q, chunk)], b);
        }
    }
    __syncthreads();  // the whole tile is in shared memory before anyone reads it
    // 3. Shared memory to out: thread (tx, ty) writes chunk tx of rows
    //    VEC * (ty + k * RY) + w of the tile, so a warp writes whole lines.
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int w = 0; w < VEC; ++w) {
            const int q = VEC * (ty + k * RY) + w;
            float b[VEC];
            load_vec<VEC>(&tile[q * TILE + VEC * swizzle<VEC>(q, tx)], b);
            const int r = o_r0 + q, c = o_c0 + VEC * tx;
            if (fast_out) {
                store_vec<VEC>(&out[r * out_cols + c], b);
            } else {
#pragma unroll
                for (int v = 0; v < VEC; ++v)
                    if (r < out_rows && c + v < out_cols) out[r * out_cols + c + v] = b[v];
            }
        }
    }
}

// The tuning sweep instantiates these by name (CuPy name_expressions):
// transpose_coarsened_t<64, 16, 4>, copy_tiled_t<64, 16, 4>, ...
template <int TILE, int RY, int VEC>
__global__ void __launch_bounds__(TILE / VEC * RY)
transpose_coarsened_t(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    tile_move<TILE, RY, VEC, true>(in, out, rows, cols);
}

// The default, a guess for an H200 (COARSENED in kernels/transpose.py; the
// bench sweeps TUNING around it): 64 x 64 tiles, 16 x 16 threads, float4.
// Each thread has 4 loads of 16 bytes in flight (16 elements, 4x step 3);
// 32 registers and 16 KB of shared memory let 8 blocks of 256 threads fill
// an SM (full occupancy): up to 128 KB of loads in flight per SM, where
// Little's law asks a few KB (2.1 TB/s of reads / 132 SMs x an HBM latency
// of a few hundred ns, as the memory chapter's pointer chase measures it
// unloaded; longer under load). 16,384 blocks at 8192^2: 15 waves of 1,056.
namespace co {
constexpr int TILE = 64, RY = 16, VEC = 4;
}

extern "C" __global__ void __launch_bounds__(co::TILE / co::VEC * co::RY)
transpose_coarsened(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    tile_move<co::TILE, co::RY, co::VEC, true>(in, out, rows, cols);
}
// --8<-- [end:transpose_coarsened]

// --8<-- [start:copy_tiled]
// Yardstick: step 4's launch and accesses with out = in (rows x cols); what a tile-shaped copy can do.
// Same loads, same shared-memory round trip and barrier, same stores; only
// the transposition is missing. The gap between a transpose and this copy
// is what transposing costs; the gap between this copy and cudaMemcpy is
// what the tile shape costs.
template <int TILE, int RY, int VEC>
__global__ void __launch_bounds__(TILE / VEC * RY)
copy_tiled_t(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    tile_move<TILE, RY, VEC, false>(in, out, rows, cols);
}

extern "C" __global__ void __launch_bounds__(co::TILE / co::VEC * co::RY)
copy_tiled(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    tile_move<co::TILE, co::RY, co::VEC, false>(in, out, rows, cols);
}
// --8<-- [end:copy_tiled]
