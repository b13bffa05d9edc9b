"""Exercise stencil_borders (chapter: the four-step tuning method).

`conv(x, w, out)` computes the chapter's 5 x 5 convolution of an H x W
float32 image x with the filter w (5 x 5), with zero padding:

    out[y, x] = sum over i, j of w[i, j] * x[y + i - 2, x + j - 2]   (0 outside the image)

one thread per output pixel on a 2-D grid of 16 x 16 blocks (step 2 of the
chapter: neighbouring threads along a row). The kernel works on flat
arrays, the way the chapter's CUDA C does (pixel (y, x) at y * W + x), and
decides whether a tap lies in the image from its flat index alone. That
catches the taps above the first row and below the last, but not those
past the left or right edge: one column left of pixel (y, 0) is, in a flat
array, the last pixel of row y - 1, which the kernel reads instead of 0.
So the two leftmost and the two rightmost columns come out wrong, at
every shape. Make it right for every shape.

    python -m kernels.exercises check stencil_borders examples/exercises/stencil_borders.py
"""

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
                k = (row + i - R) * W + (col + j - R)  # the tap's pixel, as a flat index
                if 0 <= k < H * W:  # "inside the image"?
                    acc += w[i * KW + j] * x[k]
        out[row * W + col] = acc


def conv(x, w, out):
    """x: H x W float32 device array; w: 5 x 5; out: H x W."""
    H, W = x.shape
    grid = (math.ceil(W / BLOCK), math.ceil(H / BLOCK))
    conv_kernel[grid, (BLOCK, BLOCK)](x.reshape(H * W), w.reshape(KW * KW), out.reshape(H * W), H, W)
