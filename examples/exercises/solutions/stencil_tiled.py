"""Solution of stencil_tiled: the block's threads fill the whole
(TILE + 4) x (TILE + 4) tile, halo included, from x (0 outside the image),
each taking every (TILE * TILE)-th element of it, so that neighbouring
threads load neighbouring pixels of a row; after the barrier every tap
is read from shared memory."""

import math

from numba import cuda, float32

R = 2  # filter radius: a 5 x 5 filter
KW = 2 * R + 1
TILE = 16  # outputs per block along each axis, one per thread
TILE_HALO = TILE + 2 * R  # the tile in shared memory: the outputs' pixels and a halo of R on each side


@cuda.jit
def conv_kernel(x, w, out):
    tile = cuda.shared.array((TILE_HALO, TILE_HALO), float32)
    H, W = x.shape
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x0, y0 = cuda.blockIdx.x * TILE, cuda.blockIdx.y * TILE  # the block's first output pixel
    for k in range(ty * TILE + tx, TILE_HALO * TILE_HALO, TILE * TILE):  # the tile and its halo
        r, c = k // TILE_HALO, k % TILE_HALO
        yy, xx = y0 + r - R, x0 + c - R  # the pixel of x that tile[r, c] holds
        tile[r, c] = x[yy, xx] if 0 <= yy < H and 0 <= xx < W else float32(0.0)
    cuda.syncthreads()  # the whole tile before any output reads it
    row, col = y0 + ty, x0 + tx
    if row < H and col < W:
        acc = float32(0.0)
        for i in range(KW):
            for j in range(KW):
                acc += w[i, j] * tile[ty + i, tx + j]  # x[row + i - R, col + j - R]
        out[row, col] = acc


def conv(x, w, out):
    """x: H x W float32 device array; w: 5 x 5; out: H x W."""
    H, W = x.shape
    conv_kernel[(math.ceil(W / TILE), math.ceil(H / TILE)), (TILE, TILE)](x, w, out)
