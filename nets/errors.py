"""Errors the networks raise for their callers to name: `nets_factory` re-exports them."""


class ImageSizeError(ValueError):
    """Images of a size the network's layers do not take: below `min_image_size`, above
    `max_image_size`, where two of its maps disagree (DLA at 112 px) or where a map does not split
    into the network's windows (MaxViT). The message says which sizes would run."""
