"""Layers every network family injects, defined once so each has one place to change.

`Conv` keeps the parameter tree of `flax.linen.Conv` (`kernel` in HWIO layout, `bias`) and its
auto-name (`Conv_0`, ...), so a checkpoint does not care which implementation ran.
"""

import flax.linen as nn

Conv = nn.Conv
