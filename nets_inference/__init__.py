"""Serving what training or published weights produced: `export` writes a network as a
self-contained `jax.export` artifact; `load` finds a network, its variables and its input
conventions from a training workdir or a weight file."""
