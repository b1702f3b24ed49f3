"""Network definitions as Flax linen modules, one family per file; `nets_factory` is the door."""
