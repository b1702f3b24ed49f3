"""A 2-D convolution with its own gradient, written for XLA:CPU.

XLA's algebraic simplifier swaps a convolution's operands whenever the kernel's spatial size
exceeds the input's (a 3x3 kernel on the 2x2 maps of ResNet's last stage at 64 px). XLA:CPU does
not hand the swapped convolution to Eigen: it runs as a generated loop at ~2 GFLOP/s, and four
such convolutions (forward and input gradient of the last stage) took ~1.7 s of a 2.2 s ResNet-18
train step. No XLA flag turns the swap off, so `conv2d` avoids the shapes that trigger it and
writes the rest as matrix products, which XLA:CPU runs well:

- 1x1 kernels: forward and input gradient are matrix products.
- outputs of 2x2 or smaller: the forward and the filter gradient are one matrix product over the
  patches (im2col); the patches are small because the output is.
- kernels larger than the input map (e.g. 7x7 on 4x4): the input is padded explicitly and put
  behind `lax.optimization_barrier`, which stops XLA folding the pad back into the convolution and
  swapping anyway; the convolution itself then has VALID padding.
- the input gradient of all of these: one matrix product `dy @ w^T` gives each output pixel's
  patch gradient, and col2im scatter-adds the patches back (a sum of strided `lax.pad`s that XLA
  fuses into one loop).
- the filter gradient of every ungrouped convolution: one `patches^T @ dy` product per kernel
  row, over strided slices of the kernel's horizontal taps laid side by side. XLA:CPU's own
  filter gradient transposes both operands first and recomputes their producers (BatchNorm,
  ReLU, residual sums) inside the transposes: up to 340 ms for one 1x1 convolution of a
  ResNet-50 step at batch 8. Ordinary convolutions with outputs under 14x14 or under 48
  channels keep XLA's own, which is faster there; so does anything above 256 MB of patches.
- the filter gradient of few-channel, unstrided convolutions (CIFAR ResNets: at most 64 input
  channels) whose whole-batch patches would exceed 8 MB: one product `rows^T @ shifted` of two 3x
  operands instead of 9x patches. `rows` holds the kernel's horizontal taps of the input side by
  side (as above); `shifted` holds `dy` shifted down by each kernel row. Block `(dj, di)` of the
  `[kw * in, kh * out]` product is kernel tap `(di, dj)`. It runs over chunks of images (a
  `lax.scan`) that stay in cache: XLA:CPU `mmap`s an executable's temporaries afresh at every
  run unless glibc is told otherwise (`nets_training.host_memory`), and every page they touch then
  costs a page fault.
- grouped convolutions (ResNeXt): the same im2col + col2im, with the groups as the batch dimension
  of the matrix products. XLA:CPU's own grouped convolution ran 37-100x slower.
- depthwise convolutions (MobileNet): a sum of shifted slices times the per-channel taps, and its
  adjoint: elementwise work XLA fuses. XLA:CPU's own ran 6-30x slower.

Ordinary convolutions on maps at least as large as the kernel keep XLA's own forward and input
gradient, which XLA:CPU runs well (col2im measured 0.6-0.8x of its input gradient there).
`bench/conv_layers.py` times each case against XLA's.

Layouts are NHWC inputs and HWIO kernels, as in `flax.linen.Conv`; `padding` is explicit
`((top, bottom), (left, right))`.
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from nets.layers.cpu import windows
from nets.layers.padding import Pads, output_size

_DIMENSION_NUMBERS = ("NHWC", "HWIO", "NHWC")
_PATCHES_MAX_ELEMENTS = 1 << 26  # larger im2col filter gradients fall back to XLA's own
_ROWS_MIN_OUTPUT_PIXELS = 14 * 14  # smaller maps keep XLA's own filter gradient
# So do narrow outputs: 3x3 from 128 to 32 channels, batch 8, at 28x28 and 56x56: 7.8 and 68 ms
# XLA's own against 24 and 85 the row patches' (DenseNet-121's growth convolutions: its train
# step at 112 px 557 -> 472 ms, flax's 477); from 48 channels the rows win at 56x56.
_ROWS_MIN_OUT_FEATURES = 48
# The shifted filter gradient: for convolutions of at most this many input channels whose whole
# batch of im2col patches would exceed 8 MB of float32, chunks of whole images of about
# `_CHUNK_ROWS` rows of the product (16384 x 48 float32 = 3 MB for a 16-channel 3x3 kernel).
# Above 64 channels the row patches were faster (ResNet-18's and ResNet-50's steps: 0.98x and
# 0.92x with this one); under 8 MB XLA's own is as fast (ResNet-20 on the 8 px digits, 2.4 MB).
_CHUNKED_MAX_IN_FEATURES = 64
_CHUNKED_MIN_PATCH_ELEMENTS = 1 << 21
_CHUNK_ROWS = 16384


def conv2d(
    x: jax.Array,
    w: jax.Array,
    strides: tuple[int, int],
    padding: Pads,
    feature_group_count: int = 1,
    precision: lax.PrecisionLike = None,
) -> jax.Array:
    """`lax.conv_general_dilated` for NHWC x HWIO with the CPU-friendly gradient above.

    Args:
      x: input `[batch, height, width, in_features]`.
      w: kernel `[kh, kw, in_features // feature_group_count, out_features]`.
      strides: `(sh, sw)`.
      padding: explicit, non-negative `((top, bottom), (left, right))`.
      feature_group_count: as in `lax.conv_general_dilated`.
      precision: passed to every matrix product and convolution.

    Returns:
      `[batch, out_height, out_width, out_features]` in the dtype of `x`.
    """
    strides = tuple(int(s) for s in strides)
    padding = tuple((int(lo), int(hi)) for lo, hi in padding)
    if any(p < 0 for pair in padding for p in pair):
        raise ValueError(f"conv2d needs non-negative padding, got {padding}")
    return _conv(x, w, strides, padding, feature_group_count, precision)


@partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4, 5))
def _conv(x, w, strides, padding, groups, precision):
    return _forward(x, w, strides, padding, groups, precision)


def _conv_fwd(x, w, strides, padding, groups, precision):
    return _forward(x, w, strides, padding, groups, precision), (x, w)


def _conv_bwd(strides, padding, groups, precision, residuals, dy):
    x, w = residuals
    dx = _input_grad(dy, w, x.shape, strides, padding, groups, precision)
    dw = _filter_grad(x, dy, w.shape, strides, padding, groups, precision)
    return dx.astype(x.dtype), dw.astype(w.dtype)


_conv.defvjp(_conv_fwd, _conv_bwd)


# Which formulation each shape gets. One function decides, so forward and gradients agree.


def _method(x_shape, w_shape, strides, padding, groups) -> str:
    _, h, w_, _ = x_shape
    kh, kw, cg, _ = w_shape
    ho, wo = _out_size(x_shape, w_shape, strides, padding)
    if groups > 1:
        return "depthwise" if cg == 1 else "grouped"
    if kh == kw == 1:
        return "matmul"
    if ho * wo <= 4:
        return "patches"
    if kh > h or kw > w_:
        return "guarded"
    return "xla"


def _out_size(x_shape, w_shape, strides, padding) -> tuple[int, int]:
    return tuple(
        output_size(n, k, s, p)
        for n, k, s, p in zip(x_shape[1:3], w_shape[:2], strides, padding, strict=True)
    )


# im2col, matrix products, XLA's own convolution.


def _patches(x, kh, kw, strides, padding, out_size, groups=1) -> jax.Array:
    """im2col: `[n * ho * wo, kh * kw * in_features]`, or with groups
    `[n * ho * wo, kh * kw, groups, in_features // groups]`."""
    taps = windows.window_slices(windows.pad(x, padding), (kh, kw), strides, out_size)
    patches = jnp.stack(taps, axis=3)
    if groups == 1:  # two-dimensional: XLA:CPU runs a plain matrix product best
        return patches.reshape(-1, kh * kw * x.shape[3])
    return patches.reshape(-1, kh * kw, groups, x.shape[3] // groups)


def _row_patches_fit(x_shape, w_shape, padding, out_width) -> bool:
    """Whether `_row_patches` stay under `_PATCHES_MAX_ELEMENTS` (256 MB of float32); those of a
    1-wide kernel are the input itself."""
    n, h, _, c = x_shape
    height, kw = h + sum(padding[0]), w_shape[1]
    return kw == 1 or n * height * out_width * kw * c <= _PATCHES_MAX_ELEMENTS


def _row_patches(x, kw, strides, padding, out_width) -> jax.Array:
    """The `kw` horizontal taps side by side: `[n, padded_height, out_width, kw * in_features]`.

    Row `i * sh + di` of it, for output row `i`, is the patch of kernel row `di`: kernel row `di`
    of the filter gradient is one matrix product over a strided slice of it. Built with `kw`
    slices (3x the input for a 3x3 kernel), it costs a third of full im2col patches, which
    XLA:CPU also assembles slowly (its 9-way concatenation runs at ~1 GB/s).
    """
    xp = windows.pad(x, padding)
    taps = windows.window_slices(xp, (1, kw), (1, strides[1]), (xp.shape[1], out_width))
    return taps[0] if kw == 1 else jnp.concatenate(taps, axis=-1)


def _matmul(a, b, precision, contract=((1,), (0,))):
    """`a @ b` (or another contraction of two matrices) accumulated in float32 at least."""
    return _batched_matmul(a, b, contract, ((), ()), precision)


def _batched_matmul(a, b, contract, batch, precision):
    """`lax.dot_general` accumulated in float32 at least; batch dimensions (groups) come first."""
    acc = jnp.promote_types(jnp.result_type(a, b), jnp.float32)
    return lax.dot_general(a, b, (contract, batch), precision, preferred_element_type=acc)


def _col2im(cols, window, x_shape, strides, padding):
    """`windows.col2im` of patch gradients `[n, ho, wo, kh * kw, c]`."""
    taps = [lax.index_in_dim(cols, t, axis=3, keepdims=False) for t in range(cols.shape[3])]
    return windows.col2im(taps, window, x_shape[1:3], strides, padding)


def _xla_conv(x, w, strides, padding, groups, precision):
    return lax.conv_general_dilated(
        x,
        w,
        strides,
        padding,
        dimension_numbers=_DIMENSION_NUMBERS,
        feature_group_count=groups,
        precision=precision,
    )


def _guarded_pad(x, padding):
    """The padded input behind a barrier, so XLA cannot fold the pad into a swapped convolution."""
    return lax.optimization_barrier(windows.pad(x, padding))


# Forward, input gradient, filter gradient.


def _forward(x, w, strides, padding, groups, precision):
    method = _method(x.shape, w.shape, strides, padding, groups)
    n, kh, kw, out = x.shape[0], w.shape[0], w.shape[1], w.shape[3]
    ho, wo = _out_size(x.shape, w.shape, strides, padding)
    if method == "matmul":
        (xs,) = windows.window_slices(windows.pad(x, padding), (1, 1), strides, (ho, wo))
        y = _matmul(xs.reshape(-1, x.shape[3]), w.reshape(-1, out), precision)
    elif method == "patches":
        y = _matmul(_patches(x, kh, kw, strides, padding, (ho, wo)), w.reshape(-1, out), precision)
    elif method == "grouped":
        patches = _patches(x, kh, kw, strides, padding, (ho, wo), groups)  # [m, k, g, cg]
        w = w.reshape(kh * kw, w.shape[2], groups, out // groups)
        y = _batched_matmul(patches, w, ((1, 3), (0, 1)), ((2,), (2,)), precision)  # [g, m, og]
        y = jnp.moveaxis(y, 0, 1)
    elif method == "depthwise":
        y = _depthwise_forward(x, w, strides, padding, (ho, wo))
    elif method == "guarded":
        y = _xla_conv(_guarded_pad(x, padding), w, strides, ((0, 0), (0, 0)), 1, precision)
    else:
        y = _xla_conv(x, w, strides, padding, groups, precision)
    return y.reshape(n, ho, wo, out).astype(x.dtype)


def _input_grad(dy, w, x_shape, strides, padding, groups, precision):
    method = _method(x_shape, w.shape, strides, padding, groups)
    kh, kw, cg, out = w.shape
    n, ho, wo, _ = dy.shape
    if method == "depthwise":
        return _depthwise_input_grad(dy, w, x_shape, strides, padding)
    if method == "xla":  # Eigen's transposed convolution beats col2im on large maps
        x = jnp.zeros(x_shape, dy.dtype)
        _, vjp = jax.vjp(lambda x_: _xla_conv(x_, w, strides, padding, groups, precision), x)
        return vjp(dy)[0]
    # dy @ w^T is each output pixel's patch gradient (per group); col2im adds the patches back.
    if groups == 1:
        cols = _matmul(dy.reshape(-1, out), w.reshape(-1, out), precision, ((1,), (1,)))
        return _col2im(cols.reshape(n, ho, wo, kh * kw, cg), (kh, kw), x_shape, strides, padding)
    dy = dy.reshape(-1, groups, out // groups)
    w = w.reshape(kh * kw, cg, groups, out // groups)
    cols = _batched_matmul(dy, w, ((2,), (3,)), ((1,), (2,)), precision)  # [g, m, k, cg]
    cols = jnp.moveaxis(cols, 0, 2).reshape(n, ho, wo, kh * kw, cg * groups)
    return _col2im(cols, (kh, kw), x_shape, strides, padding)


def _filter_grad(x, dy, w_shape, strides, padding, groups, precision):
    method = _method(x.shape, w_shape, strides, padding, groups)
    kh, kw, _, out = w_shape
    ho, wo = dy.shape[1:3]
    # XLA's own filter gradient wins on small maps (0.8x at 7x7; ResNet-20's 8x8 digits).
    large_map = method != "xla" or (
        ho * wo >= _ROWS_MIN_OUTPUT_PIXELS and out >= _ROWS_MIN_OUT_FEATURES
    )
    if method == "patches":  # tiny outputs: the forward's im2col patches are small
        patches = _patches(x, kh, kw, strides, padding, (ho, wo))
        return _matmul(patches, dy.reshape(-1, out), precision, ((0,), (0,))).reshape(w_shape)
    if method == "xla" and _chunked_pays(x.shape, w_shape, dy.shape, strides):
        return _shifted_filter_grad(x, dy, w_shape, strides, padding, precision)
    if groups == 1 and large_map and _row_patches_fit(x.shape, w_shape, padding, wo):
        # One patches^T @ dy product per kernel row. XLA:CPU's own filter gradient transposes
        # both operands first, and recomputes their producers (BatchNorm, ReLU, residual sums)
        # inside the transposes.
        rows = _row_patches(x, kw, strides, padding, wo)
        dy = dy.reshape(-1, out)
        row_slices = windows.window_slices(rows, (kh, 1), (strides[0], 1), (ho, wo))
        dw = [
            _matmul(r.reshape(-1, kw * x.shape[3]), dy, precision, ((0,), (0,))) for r in row_slices
        ]
        return jnp.stack(dw).reshape(w_shape)
    if method == "grouped":
        patches = _patches(x, kh, kw, strides, padding, (ho, wo), groups)  # [m, k, g, cg]
        dy = dy.reshape(-1, groups, out // groups)
        dw = _batched_matmul(patches, dy, ((0,), (0,)), ((2,), (1,)), precision)  # [g, k, cg, og]
        return jnp.moveaxis(dw, 0, 2).reshape(w_shape)
    if method == "depthwise":
        return _depthwise_filter_grad(x, dy, w_shape, strides, padding)
    if method == "guarded":
        x, padding = _guarded_pad(x, padding), ((0, 0), (0, 0))
    w = jnp.zeros(w_shape, dy.dtype)
    _, vjp = jax.vjp(lambda w_: _xla_conv(x, w_, strides, padding, groups, precision), w)
    return vjp(dy)[0]


def _chunked_pays(x_shape, w_shape, dy_shape, strides) -> bool:
    """Whether `_shifted_filter_grad` is measured faster than the alternatives (see above): not
    for strided convolutions, whose row patches or XLA's own ran 1.9-6x faster (the stems' 7x7/2,
    3x3/2 and 7x7/4 of 3 channels, a 3x3/2 of 64)."""
    kh, kw, c, _ = w_shape
    n, ho, wo, _ = dy_shape
    patch_elements = n * ho * wo * kh * kw * c
    return (
        strides == (1, 1)
        and c <= _CHUNKED_MAX_IN_FEATURES
        and patch_elements >= _CHUNKED_MIN_PATCH_ELEMENTS
    )


def _shifted_filter_grad(x, dy, w_shape, strides, padding, precision):
    """`rows^T @ shifted` (`_shifted_operands`) summed over chunks of whole images of about
    `_CHUNK_ROWS` rows each (a `lax.scan`), and the images left after the last whole chunk as
    one more product.

    The same products as im2col's `patches^T @ dy`, from operands 3x the input and 3x `dy`
    (6x in all, against 9x for the patches) built with 6 slices and pads, and one product with a
    squarer result (`[48, 48]` against `[144, 16]` at 16 channels). ResNet-20's step at batch
    128, 32 px: 1.16x over the chunked patches (interleaved), which were 1.3-1.6x over the whole
    batch's row patches. 16384 rows beat 8192 and the whole batch there.
    """
    kh, kw, c, out = w_shape
    n = x.shape[0]
    rows_per_image = (x.shape[1] + sum(padding[0])) * dy.shape[2]
    per_chunk = max(1, min(n, _CHUNK_ROWS // rows_per_image))
    whole = n // per_chunk * per_chunk

    def chunk_grad(x_, dy_):
        rows, shifted = _shifted_operands(x_, dy_, kh, kw, strides, padding)
        return _matmul(rows, shifted, precision, ((0,), (0,)))

    def add_chunk(acc, chunk):
        return acc + chunk_grad(*chunk), None

    if whole == per_chunk:
        dw = chunk_grad(x[:whole], dy[:whole])
    else:
        chunks = (
            x[:whole].reshape(whole // per_chunk, per_chunk, *x.shape[1:]),
            dy[:whole].reshape(whole // per_chunk, per_chunk, *dy.shape[1:]),
        )
        acc = jnp.promote_types(jnp.result_type(x, dy), jnp.float32)
        dw, _ = lax.scan(add_chunk, jnp.zeros((kw * c, kh * out), acc), chunks)
    if whole < n:
        dw += chunk_grad(x[whole:], dy[whole:])
    return dw.reshape(kw, c, kh, out).transpose(2, 0, 1, 3)  # [dj, c, di, o] -> HWIO


def _shifted_operands(x, dy, kh, kw, strides, padding):
    """`rows` `[m, kw * in]`: the row patches of `x` (`_row_patches`, on every padded row), and
    `shifted` `[m, kh * out]`: for each kernel row `di`, `dy` placed on the padded rows it reads
    (output row `i` on row `i * sh + di`, zeros elsewhere), so that `rows^T @ shifted` holds
    kernel tap `(di, dj)` in block `(dj, di)`."""
    ho, wo = dy.shape[1:3]
    rows = _row_patches(x, kw, strides, padding, wo)
    height, sh = rows.shape[1], strides[0]
    zero, keep = jnp.zeros((), dy.dtype), (0, 0, 0)
    shifted = [
        lax.pad(dy, zero, (keep, (di, height - di - (ho - 1) * sh - 1, sh - 1), keep, keep))
        for di in range(kh)
    ]
    shifted = shifted[0] if kh == 1 else jnp.concatenate(shifted, axis=-1)
    return rows.reshape(-1, rows.shape[-1]), shifted.reshape(-1, shifted.shape[-1])


# Depthwise (one input channel per group, `multiplier` outputs each): shifted slices times taps.


def _depthwise_forward(x, w, strides, padding, out_size):
    xp = windows.pad(x, padding)
    multiplier = w.shape[3] // x.shape[3]
    if multiplier > 1:  # output channel c * multiplier + k reads input channel c
        xp = jnp.repeat(xp, multiplier, axis=3)
    return _depthwise_taps(xp, w, strides, out_size)


def _depthwise_taps(xp, w, strides, out_size):
    """Sum over the window of the strided views of `xp` times their per-channel taps of `w`."""
    kh, kw, _, out = w.shape
    taps = windows.window_slices(xp, (kh, kw), strides, out_size)
    acc = jnp.promote_types(xp.dtype, jnp.float32)
    w_taps = _cast(w.reshape(kh * kw, out), acc)
    y = None
    for t, tap in enumerate(taps):  # lax, not jnp: NASNet traces thousands of these terms
        w_t = lax.broadcast_in_dim(lax.index_in_dim(w_taps, t, keepdims=False), tap.shape, (3,))
        term = lax.mul(_cast(tap, acc), w_t)
        y = term if y is None else lax.add(y, term)
    return y


def _cast(x, dtype):
    return x if x.dtype == dtype else lax.convert_element_type(x, dtype)


def _depthwise_input_grad(dy, w, x_shape, strides, padding):
    """col2im up to 3x3 kernels; above, a forward depthwise convolution of `dy`, dilated by the
    stride and padded, against the flipped kernel: XLA:CPU fuses col2im's sum of 25 or 49
    placed taps badly (20-40x slower), while the dilation wastes work on stride-2 3x3 kernels."""
    kh, kw, _, out = w.shape
    n, ho, wo, _ = dy.shape
    multiplier = out // x_shape[3]
    if kh * kw <= 9:
        acc = jnp.promote_types(dy.dtype, jnp.float32)
        cols = dy.astype(acc)[:, :, :, None, :] * w[:, :, 0].reshape(kh * kw, out).astype(acc)
        if multiplier > 1:
            cols = cols.reshape(n, ho, wo, kh * kw, x_shape[3], multiplier).sum(-1)
        return _col2im(cols, (kh, kw), x_shape, strides, padding)
    (h, w_), (sh, sw), ((pt, _), (pl, _)) = x_shape[1:3], strides, padding
    dilated = lax.pad(
        dy,
        jnp.zeros((), dy.dtype),
        (
            (0, 0, 0),
            (kh - 1 - pt, h + pt - sh * (ho - 1) - 1, sh - 1),
            (kw - 1 - pl, w_ + pl - sw * (wo - 1) - 1, sw - 1),
            (0, 0, 0),
        ),
    )
    flipped = lax.rev(w, (0, 1))
    dx = _depthwise_taps(dilated, flipped, (1, 1), (h, w_))
    if multiplier > 1:  # output channel c * multiplier + k read input channel c
        dx = dx.reshape(n, h, w_, x_shape[3], multiplier).sum(-1)
    return dx


def _depthwise_filter_grad(x, dy, w_shape, strides, padding):
    kh, kw, _, out = w_shape
    xp = windows.pad(x, padding)
    multiplier = out // x.shape[3]
    if multiplier > 1:
        xp = jnp.repeat(xp, multiplier, axis=3)
    acc = jnp.promote_types(x.dtype, jnp.float32)
    taps = windows.window_slices(xp, (kh, kw), strides, dy.shape[1:3])
    dy = dy.astype(acc)
    dw = jnp.stack([jnp.sum(lax.mul(_cast(t, acc), dy), axis=(0, 1, 2)) for t in taps])
    return dw.reshape(w_shape)
