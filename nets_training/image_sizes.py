"""The image size a run trains at, when `data.image_size` does not say: the dataset's own size
for in-memory datasets (digits 8 px, CIFAR 32 px), raised to the network's total stride; the
network's `default_image_size` for image files, which are cropped and resized anyway.

Below its total stride a network's last stages see 1x1 maps made mostly of padding (MobileNet on
8 px digits stays at chance). A size the user sets is theirs, as long as the network's layers
accept it (`NetworkFn.min_image_size`: VGG's five pools need 32 px, Inception's 'VALID' stem 75,
its auxiliary head 107; `max_image_size` where the layers are made for one size: an MLP-Mixer
takes 224 to 239 px).
"""

import nets_factory
from nets_training.errors import UserError
from nets_training.sources import Dataset


def total_stride_size(train_fn: nets_factory.NetworkFn) -> int:
    """The side that leaves `train_fn`'s last feature map 1x1 (its total stride, the deepest of
    its declared `feature_strides`), or the smallest its layers accept where that is more.
    Nothing is traced (a trace took 0.6 s for a small ResNet, 11 s for NASNet-CIFAR): the
    registry test checks each network's declared strides against its traced maps."""
    stride = max(train_fn.module.feature_strides().values())
    return max(stride, train_fn.min_image_size)


def image_size(requested: int | None, dataset: Dataset, train_fn: nets_factory.NetworkFn) -> int:
    """`data.image_size` resolved for the training network `train_fn`: `requested` if its layers
    accept it (else a one-line error naming the sizes they take), or the dataset's own size raised
    to the network's total stride, or the network's default size for variable-size images and for
    networks made for one size that the dataset's size is past."""
    default = train_fn.default_image_size
    minimum, maximum = train_fn.min_image_size, train_fn.max_image_size
    if requested is not None:
        if maximum is not None and not minimum <= requested <= maximum:
            raise UserError(
                f"data.image_size={requested}: {train_fn.name} takes images of {minimum} to "
                f"{maximum} px, the size its layers are made for; set data.image_size between "
                f"them, or leave it unset (other sizes: model.kwargs.{train_fn.module.resize_with})"
            )
        if requested < minimum:
            raise UserError(
                f"data.image_size={requested}: {train_fn.name} needs images of at least {minimum} "
                f"px; set data.image_size={minimum} or more, or leave it unset"
            )
        return requested
    if dataset.fixed_size is None:
        return default
    if dataset.fixed_size >= default:
        return (
            default if maximum is not None and dataset.fixed_size > maximum else dataset.fixed_size
        )
    return max(dataset.fixed_size, total_stride_size(train_fn))
