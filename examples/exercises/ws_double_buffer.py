"""Exercise ws_double_buffer (chapter: warp specialization).

`stream(x, out)` computes out[i] = f^8(x[i]) with f(v) = v * 0.999 + 0.001
(cuda.fma; x, out: float32, n >= 1), the chapter's streaming workload,
through shared memory in tiles of TILE floats. Each block walks its tiles
(blockIdx.x, blockIdx.x + gridDim.x, ...) as a software pipeline over two
buffers (ping-pong): on each turn every thread issues its loads of the
next tile into registers, computes its part of this tile from one buffer
(floats that other threads loaded), then stores the next tile into the
other buffer; one barrier per tile, where the chapter's step 2 needs two.

It is wrong: the loop runs only while there is a next tile to prefetch,
so each block's last tile is loaded into shared memory and never computed
(the pipeline has no drain). Make it right for every n, keeping the
double buffer and one barrier per tile. Runs in Numba's CUDA simulator
(small sizes) or on any CUDA GPU.

    python -m kernels.exercises check ws_double_buffer examples/exercises/ws_double_buffer.py
"""

from numba import cuda, float32

K_STEPS = 8                        # out[i] = f^8(x[i]), f(v) = v * A + B
A, B = float32(0.999), float32(0.001)
TILE = 512                         # floats per tile
THREADS = 128
PER = TILE // THREADS              # floats each thread loads, and computes, per tile
BLOCKS_PER_SM = 8


@cuda.jit
def stream_kernel(x, out, k, a, b):
    buf = cuda.shared.array((2, TILE), float32)  # ping-pong: one buffer computed, the other filled
    held = cuda.local.array(PER, float32)        # the next tile's loads, in flight during the arithmetic
    n = x.shape[0]
    tiles = (n + TILE - 1) // TILE
    t = cuda.threadIdx.x
    tile = cuda.blockIdx.x
    for j in range(PER):  # prologue: this block's first tile into buffer 0 (coalesced: stride THREADS)
        i = tile * TILE + t + j * THREADS
        buf[0, t + j * THREADS] = x[i] if i < n else float32(0.0)
    cuda.syncthreads()
    cur = 0
    while tile + cuda.gridDim.x < tiles:  # while there is a next tile to prefetch
        nxt = tile + cuda.gridDim.x
        for j in range(PER):  # 1. issue the next tile's loads (past the end: zeros)
            i = nxt * TILE + t + j * THREADS
            held[j] = x[i] if i < n else float32(0.0)
        for j in range(PER):  # 2. compute this tile: PER consecutive floats, loaded by other threads
            q = t * PER + j
            i = tile * TILE + q
            if i < n:
                v = buf[cur, q]
                for _ in range(k):
                    v = cuda.fma(v, a, b)
                out[i] = v
        for j in range(PER):  # 3. the next tile into the other buffer
            buf[1 - cur, t + j * THREADS] = held[j]
        cuda.syncthreads()  # the next tile is in place, and this one's buffer may be refilled
        tile = nxt
        cur = 1 - cur


def sm_count():
    """The GPU's SM count (the simulator's device has none: one)."""
    return getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1)


def stream(x, out):
    """x, out: float32 device arrays of one length n >= 1; out[i] = f^8(x[i])."""
    tiles = (x.shape[0] + TILE - 1) // TILE
    blocks = min(tiles, BLOCKS_PER_SM * sm_count())
    stream_kernel[blocks, THREADS](x, out, K_STEPS, A, B)
