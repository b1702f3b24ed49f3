"""Numerics for XLA:CPU: a convolution and a max pool with gradients written as matrix products and
strided slices. Only `nets.layers.conv` and `nets.layers.pooling` call them."""
