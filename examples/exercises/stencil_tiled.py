"""Exercise stencil_tiled (chapter: the four-step tuning method, step 3).

`conv(x, w, out)` computes the chapter's 5 x 5 convolution of an H x W
float32 image x with the filter w (5 x 5), with zero padding:

    out[y, x] = sum over i, j of w[i, j] * x[y + i - 2, x + j - 2]   (0 outside the image)

Step 3 of the chapter: each input pixel is used by 25 outputs, so a block
of TILE x TILE threads (one output each) first copies its part of the
image into shared memory once, and then reads all 25 taps from there. The
kernel below is the skeleton of that: the shared tile has room for the
block's TILE x TILE pixels plus a halo of R = 2 pixels on each side, but
only the centre is loaded; the halo is left at zero (the TODO). That is
right where the halo lies outside the image, so an image of one tile
comes out right, and wrong wherever a block has a neighbour.

1) Load the halo: fill the whole (TILE + 4) x (TILE + 4) tile from x
   (0 outside the image), every thread of the block taking its share, and
   keep the barrier before the taps are read. Make it right at every shape.
2) On a GPU, make it fast: at least 0.55 of the speed of the chapter's
   CUDA C step 3 with 16 x 16 tiles (`conv2d_cupy(..., variant="tiled16")`;
   the chapter's own Numba tiled16 ran at about 0.68 of it on an H200).

    python -m kernels.exercises check stencil_tiled examples/exercises/stencil_tiled.py
"""

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
    # TODO: the halo. Here the whole tile is cleared to zero ...
    for k in range(ty * TILE + tx, TILE_HALO * TILE_HALO, TILE * TILE):
        tile[k // TILE_HALO, k % TILE_HALO] = float32(0.0)
    cuda.syncthreads()
    # ... and each thread loads only the pixel under it, into the centre
    row, col = y0 + ty, x0 + tx
    if row < H and col < W:
        tile[ty + R, tx + R] = x[row, col]
    cuda.syncthreads()  # the whole tile before any output reads it
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
