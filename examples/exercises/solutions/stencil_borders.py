"""Solution of stencil_borders: a tap is inside the image when its row and
its column both are, 0 <= y < H and 0 <= x < W, checked apart; only then
is its flat index y * W + x the right pixel."""

import math

from numba import cuda, float32

R = 2  # filter radius: a 5 x 5 filter
KW = 2 * R + 1
BLOCK = 16


@cuda.jit
def conv_kernel(x, w, out, H, W):
    col, row = cuda.grid(2)  # x along a row: coalesced
    if row < H and col < W:
        acc = float32(0.0)
        for i in range(KW):
            for j in range(KW):
                yy, xx = row + i - R, col + j - R
                if 0 <= yy < H and 0 <= xx < W:  # the row and the column, each in range
                    acc += w[i * KW + j] * x[yy * W + xx]
        out[row * W + col] = acc


def conv(x, w, out):
    """x: H x W float32 device array; w: 5 x 5; out: H x W."""
    H, W = x.shape
    grid = (math.ceil(W / BLOCK), math.ceil(H / BLOCK))
    conv_kernel[grid, (BLOCK, BLOCK)](x.reshape(H * W), w.reshape(KW * KW), out.reshape(H * W), H, W)
