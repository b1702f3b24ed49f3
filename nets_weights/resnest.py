"""timm's ResNeSt and Res2Net state dicts, as our `nets.resnest` and `nets.res2net`: timm's
ResNet keys (`nets_weights.resnet.layout`), the blocks' layers named as timm's (`conv1`, `bn1`,
ResNeSt's `conv2.{conv,bn0,fc1,bn1,fc2}`, Res2Net's `convs.{i}` / `bns.{i}`, `conv3`, `bn3`).
Padded on both sides, as timm pads (the blocks' average pools too). The preprocessing of files
without a config.json is timm's default weights' (ResNeSt-*e at 256, 320 and 416 px).
"""

from nets_weights.resnet import timm_architecture

# timm's names, which are ours -> (image size, crop fraction, interpolation) of the weights.
_PREPROCESSING = {
    "resnest14d": (224, 0.875, "bilinear"),
    "resnest26d": (224, 0.875, "bilinear"),
    "resnest50d": (224, 0.875, "bilinear"),
    "resnest101e": (256, 0.875, "bilinear"),
    "resnest200e": (320, 0.909, "bicubic"),
    "resnest269e": (416, 0.928, "bicubic"),
    "resnest50d_4s2x40d": (224, 0.875, "bicubic"),
    "resnest50d_1s4x24d": (224, 0.875, "bicubic"),
    **dict.fromkeys(
        (
            "res2net50_26w_4s",
            "res2net101_26w_4s",
            "res2net50_26w_6s",
            "res2net50_26w_8s",
            "res2net50_48w_2s",
            "res2net50_14w_8s",
            "res2next50",
            "res2net50d",
            "res2net101d",
        ),
        (224, 0.875, "bilinear"),
    ),
}

ARCHITECTURES = {
    name: timm_architecture(name, image_size=size, crop_fraction=crop, interpolation=interpolation)
    for name, (size, crop, interpolation) in _PREPROCESSING.items()
}
