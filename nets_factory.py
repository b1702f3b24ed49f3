"""The public door: `networks_map` and `get_network_fn`, TF-Slim's nets_factory for Flax.

    network_fn = get_network_fn('resnet50', num_classes=1000, weight_decay=1e-4, is_training=True)
    variables = network_fn.init(rng, images)
    (logits, end_points), updates = network_fn.apply(variables, images, mutable=['batch_stats'])
    loss = cross_entropy(logits, labels) + network_fn.regularization_loss(variables['params'])

    # published weights (timm / Hugging Face, torchvision, Keras), computing their source's logits:
    network_fn, variables = load_pretrained('resnet50.a1_in1k')   # by name: downloaded once
    network_fn, variables = load_pretrained('resnet50', '~/weights/resnet50.a1_in1k')  # a folder

`python -m nets_factory` prints every network; `python -m nets_factory NAME` describes one and
lists its published weights.
"""

import contextlib
import dataclasses
import difflib
import functools
import math
import numbers
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import nets_weights
from nets import (
    alexnet,
    beit,
    cait,
    cifarnet,
    convnext,
    cspnet,
    densenet,
    dla,
    dpn,
    edgenext,
    efficientformer,
    efficientformer_v2,
    efficientnet,
    efficientvit_mit,
    efficientvit_msra,
    eva,
    fastvit,
    ghostnet,
    hrnet,
    inception_next,
    inception_resnet_v2,
    inception_v1,
    inception_v2,
    inception_v3,
    inception_v4,
    lenet,
    levit,
    mambaout,
    maxvit,
    metaformer,
    mlp_mixer,
    mobilenet,
    mobilenet_v1,
    mobilenet_v4,
    mobilevit,
    nasnet,
    nfnet,
    overfeat,
    pit,
    pnasnet,
    pvt_v2,
    regnet,
    repvgg,
    repvit,
    res2net,
    resnest,
    resnet,
    resnetv2,
    rexnet,
    swin,
    swinv2,
    tiny_vit,
    vgg,
    vit,
    xception,
    xcit,
)
from nets import features as pyramid
from nets.errors import ImageSizeError
from nets.features import FeatureInfo
from nets.layers.remat import checkpoint_policy
from nets.names import closest

if TYPE_CHECKING:
    import nets_nnx

networks_map: dict[str, functools.partial] = {
    # ResNet v1.5 (Flax ImageNet example, torchvision).
    "resnet18": resnet.resnet18,
    "resnet34": resnet.resnet34,
    "resnet50": resnet.resnet50,
    "resnet101": resnet.resnet101,
    "resnet152": resnet.resnet152,
    "resnet200": resnet.resnet200,
    # Slim's names. Slim strides the last unit of a stage instead of the first; the layers and
    # parameters are the same, so these are the v1.5 networks above.
    "resnet_v1_50": resnet.resnet50,
    "resnet_v1_101": resnet.resnet101,
    "resnet_v1_152": resnet.resnet152,
    "resnet_v1_200": resnet.resnet200,
    "resnet_v2_50": resnet.resnet_v2_50,
    "resnet_v2_101": resnet.resnet_v2_101,
    "resnet_v2_152": resnet.resnet_v2_152,
    "resnet_v2_200": resnet.resnet_v2_200,
    # timm's pre-activation ResNetV2 (no biases; GroupNorm, EvoNorm) and BiT (weight-standardised).
    "resnetv2_18": resnetv2.resnetv2_18,
    "resnetv2_18d": resnetv2.resnetv2_18d,
    "resnetv2_34": resnetv2.resnetv2_34,
    "resnetv2_34d": resnetv2.resnetv2_34d,
    "resnetv2_50": resnetv2.resnetv2_50,
    "resnetv2_101": resnetv2.resnetv2_101,
    "resnetv2_50d_gn": resnetv2.resnetv2_50d_gn,
    "resnetv2_50d_evos": resnetv2.resnetv2_50d_evos,
    "resnetv2_50x1_bit": resnetv2.resnetv2_50x1_bit,
    "resnetv2_50x3_bit": resnetv2.resnetv2_50x3_bit,
    "resnetv2_101x1_bit": resnetv2.resnetv2_101x1_bit,
    "resnetv2_101x3_bit": resnetv2.resnetv2_101x3_bit,
    "resnetv2_152x2_bit": resnetv2.resnetv2_152x2_bit,
    "resnetv2_152x4_bit": resnetv2.resnetv2_152x4_bit,
    # CIFAR ResNets (He et al. 2015, section 4.2).
    "resnet20": resnet.resnet20,
    "resnet32": resnet.resnet32,
    "resnet44": resnet.resnet44,
    "resnet56": resnet.resnet56,
    "resnet110": resnet.resnet110,
    # Wide ResNets and ResNeXt.
    "wide_resnet50_2": resnet.wide_resnet50_2,
    "wide_resnet101_2": resnet.wide_resnet101_2,
    "resnext50_32x4d": resnet.resnext50_32x4d,
    "resnext101_32x8d": resnet.resnext101_32x8d,
    # ResNet-D, and bottlenecks with squeeze-and-excite or ECA (timm's).
    "resnet18d": resnet.resnet18d,
    "resnet34d": resnet.resnet34d,
    "resnet26d": resnet.resnet26d,
    "resnet26t": resnet.resnet26t,
    "resnet50d": resnet.resnet50d,
    "resnet101d": resnet.resnet101d,
    "resnet152d": resnet.resnet152d,
    "resnet200d": resnet.resnet200d,
    "seresnet50": resnet.seresnet50,
    "seresnet152d": resnet.seresnet152d,
    "seresnext26d_32x4d": resnet.seresnext26d_32x4d,
    "seresnext50_32x4d": resnet.seresnext50_32x4d,
    "seresnext101_32x4d": resnet.seresnext101_32x4d,
    "seresnext101_32x8d": resnet.seresnext101_32x8d,
    "seresnext101d_32x8d": resnet.seresnext101d_32x8d,
    "ecaresnet26t": resnet.ecaresnet26t,
    "ecaresnet50d": resnet.ecaresnet50d,
    "ecaresnet101d": resnet.ecaresnet101d,
    # ResNeSt's split-attention and Res2Net's hierarchical bottlenecks (timm's).
    "resnest14d": resnest.resnest14d,
    "resnest26d": resnest.resnest26d,
    "resnest50d": resnest.resnest50d,
    "resnest101e": resnest.resnest101e,
    "resnest200e": resnest.resnest200e,
    "resnest269e": resnest.resnest269e,
    "resnest50d_4s2x40d": resnest.resnest50d_4s2x40d,
    "resnest50d_1s4x24d": resnest.resnest50d_1s4x24d,
    "res2net50_26w_4s": res2net.res2net50_26w_4s,
    "res2net101_26w_4s": res2net.res2net101_26w_4s,
    "res2net50_26w_6s": res2net.res2net50_26w_6s,
    "res2net50_26w_8s": res2net.res2net50_26w_8s,
    "res2net50_48w_2s": res2net.res2net50_48w_2s,
    "res2net50_14w_8s": res2net.res2net50_14w_8s,
    "res2next50": res2net.res2next50,
    "res2net50d": res2net.res2net50d,
    "res2net101d": res2net.res2net101d,
    # Classic networks without residual connections: Slim's small nets, AlexNet, OverFeat, VGG.
    "lenet": lenet.lenet,
    "cifarnet": cifarnet.cifarnet,
    "alexnet_v2": alexnet.alexnet_v2,
    "alexnet": alexnet.alexnet,
    "overfeat": overfeat.overfeat,
    "vgg11": vgg.vgg11,
    "vgg13": vgg.vgg13,
    "vgg16": vgg.vgg16,
    "vgg19": vgg.vgg19,
    "vgg11_bn": vgg.vgg11_bn,
    "vgg13_bn": vgg.vgg13_bn,
    "vgg16_bn": vgg.vgg16_bn,
    "vgg19_bn": vgg.vgg19_bn,
    # Slim's names for configurations A, D and E: the same networks and parameters.
    "vgg_a": vgg.vgg11,
    "vgg_16": vgg.vgg16,
    "vgg_19": vgg.vgg19,
    # MobileNet V1 (Slim's mobilenet_v1.py), V2 and V3/EdgeTPU (Slim's nets/mobilenet/).
    "mobilenet_v1": mobilenet_v1.mobilenet_v1,
    "mobilenet_v1_075": mobilenet_v1.mobilenet_v1_075,
    "mobilenet_v1_050": mobilenet_v1.mobilenet_v1_050,
    "mobilenet_v1_025": mobilenet_v1.mobilenet_v1_025,
    "mobilenet_v2": mobilenet.mobilenet_v2,
    "mobilenet_v2_140": mobilenet.mobilenet_v2_140,
    "mobilenet_v2_035": mobilenet.mobilenet_v2_035,
    "mobilenet_v3_small": mobilenet.mobilenet_v3_small,
    "mobilenet_v3_large": mobilenet.mobilenet_v3_large,
    "mobilenet_v3_small_minimalistic": mobilenet.mobilenet_v3_small_minimalistic,
    "mobilenet_v3_large_minimalistic": mobilenet.mobilenet_v3_large_minimalistic,
    "mobilenet_edgetpu": mobilenet.mobilenet_edgetpu,
    "mobilenet_edgetpu_075": mobilenet.mobilenet_edgetpu_075,
    # Inception (Slim's inception_v1 .. inception_resnet_v2, torchvision's googlenet).
    "inception_v1": inception_v1.inception_v1,
    "inception_v2": inception_v2.inception_v2,
    "inception_v3": inception_v3.inception_v3,
    "inception_v4": inception_v4.inception_v4,
    "legacy_xception": xception.legacy_xception,
    "xception41": xception.xception41,
    "xception65": xception.xception65,
    "xception71": xception.xception71,
    "xception41p": xception.xception41p,
    "xception65p": xception.xception65p,
    "inception_resnet_v2": inception_resnet_v2.inception_resnet_v2,
    "googlenet": inception_v1.googlenet,
    # NASNet-A (Zoph et al. 2018) and PNASNet-5 (Liu et al. 2018), Slim's nets/nasnet.
    "nasnet_cifar": nasnet.nasnet_cifar,
    "nasnet_mobile": nasnet.nasnet_mobile,
    "nasnet_large": nasnet.nasnet_large,
    "pnasnet_mobile": pnasnet.pnasnet_mobile,
    "pnasnet_large": pnasnet.pnasnet_large,
    # ConvNeXt (Liu et al. 2022), timm's names (the paper's four are torchvision's too), and
    # ConvNeXt V2 (Woo et al. 2023), timm's.
    "convnext_atto": convnext.convnext_atto,
    "convnext_femto": convnext.convnext_femto,
    "convnext_pico": convnext.convnext_pico,
    "convnext_nano": convnext.convnext_nano,
    "convnext_tiny": convnext.convnext_tiny,
    "convnext_small": convnext.convnext_small,
    "convnext_base": convnext.convnext_base,
    "convnext_large": convnext.convnext_large,
    "convnext_xlarge": convnext.convnext_xlarge,
    "convnext_xxlarge": convnext.convnext_xxlarge,
    "convnextv2_atto": convnext.convnextv2_atto,
    "convnextv2_femto": convnext.convnextv2_femto,
    "convnextv2_pico": convnext.convnextv2_pico,
    "convnextv2_nano": convnext.convnextv2_nano,
    "convnextv2_tiny": convnext.convnextv2_tiny,
    "convnextv2_small": convnext.convnextv2_small,
    "convnextv2_base": convnext.convnextv2_base,
    "convnextv2_large": convnext.convnextv2_large,
    "convnextv2_huge": convnext.convnextv2_huge,
    # EdgeNeXt (Maaz et al. 2022): ConvNeXt blocks and split depth-wise transpose attention,
    # timm's names.
    "edgenext_xx_small": edgenext.edgenext_xx_small,
    "edgenext_x_small": edgenext.edgenext_x_small,
    "edgenext_small": edgenext.edgenext_small,
    "edgenext_base": edgenext.edgenext_base,
    "edgenext_small_rw": edgenext.edgenext_small_rw,
    # DenseNet-BC (Huang et al. 2017), torchvision's (and timm's) four.
    "densenet121": densenet.densenet121,
    "densenet161": densenet.densenet161,
    "densenet169": densenet.densenet169,
    "densenet201": densenet.densenet201,
    # Deep Layer Aggregation (Yu et al. 2018), timm's names.
    "dla34": dla.dla34,
    "dla46_c": dla.dla46_c,
    "dla46x_c": dla.dla46x_c,
    "dla60": dla.dla60,
    "dla60x": dla.dla60x,
    "dla60x_c": dla.dla60x_c,
    "dla102": dla.dla102,
    "dla102x": dla.dla102x,
    "dla102x2": dla.dla102x2,
    "dla169": dla.dla169,
    # Cross Stage Partial networks (Wang et al. 2019), DarkNet-53 and timm's CS3: timm's names.
    "cspresnet50": cspnet.cspresnet50,
    "cspresnet50d": cspnet.cspresnet50d,
    "cspresnet50w": cspnet.cspresnet50w,
    "cspresnext50": cspnet.cspresnext50,
    "cspdarknet53": cspnet.cspdarknet53,
    "darknet17": cspnet.darknet17,
    "darknet21": cspnet.darknet21,
    "sedarknet21": cspnet.sedarknet21,
    "darknet53": cspnet.darknet53,
    "darknetaa53": cspnet.darknetaa53,
    "cs3darknet_s": cspnet.cs3darknet_s,
    "cs3darknet_m": cspnet.cs3darknet_m,
    "cs3darknet_l": cspnet.cs3darknet_l,
    "cs3darknet_x": cspnet.cs3darknet_x,
    "cs3darknet_focus_s": cspnet.cs3darknet_focus_s,
    "cs3darknet_focus_m": cspnet.cs3darknet_focus_m,
    "cs3darknet_focus_l": cspnet.cs3darknet_focus_l,
    "cs3darknet_focus_x": cspnet.cs3darknet_focus_x,
    "cs3sedarknet_l": cspnet.cs3sedarknet_l,
    "cs3sedarknet_x": cspnet.cs3sedarknet_x,
    "cs3sedarknet_xdw": cspnet.cs3sedarknet_xdw,
    "cs3edgenet_x": cspnet.cs3edgenet_x,
    "cs3se_edgenet_x": cspnet.cs3se_edgenet_x,
    # Dual Path Networks (Chen et al. 2017), timm's names (the "b" ones: its split last 1x1).
    "dpn48b": dpn.dpn48b,
    "dpn68": dpn.dpn68,
    "dpn68b": dpn.dpn68b,
    "dpn92": dpn.dpn92,
    "dpn98": dpn.dpn98,
    "dpn107": dpn.dpn107,
    "dpn131": dpn.dpn131,
    # RegNet X/Y (Radosavovic et al. 2020) from the paper's parameters: torchvision's names, and
    # timm's where its pycls weights' widths differ from torchvision's (nets/regnet.py).
    "regnet_x_400mf": regnet.regnet_x_400mf,
    "regnet_x_800mf": regnet.regnet_x_800mf,
    "regnet_x_1_6gf": regnet.regnet_x_1_6gf,
    "regnet_x_3_2gf": regnet.regnet_x_3_2gf,
    "regnet_x_8gf": regnet.regnet_x_8gf,
    "regnet_x_16gf": regnet.regnet_x_16gf,
    "regnet_y_400mf": regnet.regnet_y_400mf,
    "regnet_y_800mf": regnet.regnet_y_800mf,
    "regnet_y_1_6gf": regnet.regnet_y_1_6gf,
    "regnet_y_3_2gf": regnet.regnet_y_3_2gf,
    "regnet_y_8gf": regnet.regnet_y_8gf,
    "regnet_y_16gf": regnet.regnet_y_16gf,
    "regnetx_004": regnet.regnetx_004,
    "regnety_008": regnet.regnety_008,
    "regnety_080": regnet.regnety_080,
    # RepVGG (Ding et al. 2021), timm's names: the training form; `repvgg.reparameterize` fuses it.
    "repvgg_a0": repvgg.repvgg_a0,
    "repvgg_a1": repvgg.repvgg_a1,
    "repvgg_a2": repvgg.repvgg_a2,
    "repvgg_b0": repvgg.repvgg_b0,
    "repvgg_b1": repvgg.repvgg_b1,
    "repvgg_b1g4": repvgg.repvgg_b1g4,
    "repvgg_b2": repvgg.repvgg_b2,
    "repvgg_b2g4": repvgg.repvgg_b2g4,
    "repvgg_b3": repvgg.repvgg_b3,
    "repvgg_b3g4": repvgg.repvgg_b3g4,
    "repvgg_d2se": repvgg.repvgg_d2se,
    # FastViT (Vasu et al. 2023) and MobileCLIP's image towers, timm's names: the training form;
    # `fastvit.reparameterize` fuses it.
    "fastvit_t8": fastvit.fastvit_t8,
    "fastvit_t12": fastvit.fastvit_t12,
    "fastvit_s12": fastvit.fastvit_s12,
    "fastvit_sa12": fastvit.fastvit_sa12,
    "fastvit_sa24": fastvit.fastvit_sa24,
    "fastvit_sa36": fastvit.fastvit_sa36,
    "fastvit_ma36": fastvit.fastvit_ma36,
    "fastvit_mci0": fastvit.fastvit_mci0,
    "fastvit_mci1": fastvit.fastvit_mci1,
    "fastvit_mci2": fastvit.fastvit_mci2,
    "fastvit_mci3": fastvit.fastvit_mci3,
    "fastvit_mci4": fastvit.fastvit_mci4,
    # RepViT (Wang et al. 2024), timm's names: the training form with both distilled heads;
    # `repvit.reparameterize` fuses the token mixers.
    "repvit_m0_9": repvit.repvit_m0_9,
    "repvit_m1": repvit.repvit_m1,
    "repvit_m1_0": repvit.repvit_m1_0,
    "repvit_m1_1": repvit.repvit_m1_1,
    "repvit_m1_5": repvit.repvit_m1_5,
    "repvit_m2": repvit.repvit_m2,
    "repvit_m2_3": repvit.repvit_m2_3,
    "repvit_m3": repvit.repvit_m3,
    # Vision Transformers (Dosovitskiy et al. 2020) and DeiT (Touvron et al. 2021), timm's names.
    "vit_tiny_patch16_224": vit.vit_tiny_patch16_224,
    "vit_small_patch16_224": vit.vit_small_patch16_224,
    "vit_base_patch16_224": vit.vit_base_patch16_224,
    "vit_base_patch32_224": vit.vit_base_patch32_224,
    "vit_large_patch16_224": vit.vit_large_patch16_224,
    # DeiT's networks are ViT's: the same partials.
    "deit_tiny_patch16_224": vit.vit_tiny_patch16_224,
    "deit_small_patch16_224": vit.vit_small_patch16_224,
    "deit_base_patch16_224": vit.vit_base_patch16_224,
    "deit_tiny_distilled_patch16_224": vit.deit_tiny_distilled_patch16_224,
    "deit_small_distilled_patch16_224": vit.deit_small_distilled_patch16_224,
    "deit_base_distilled_patch16_224": vit.deit_base_distilled_patch16_224,
    # At 384 px; DeiT III; CLIP's image towers; DINOv2, with registers or not: timm's names.
    "vit_tiny_patch16_384": vit.vit_tiny_patch16_384,
    "vit_small_patch16_384": vit.vit_small_patch16_384,
    "vit_base_patch16_384": vit.vit_base_patch16_384,
    "vit_base_patch32_384": vit.vit_base_patch32_384,
    "vit_large_patch16_384": vit.vit_large_patch16_384,
    "deit3_small_patch16_224": vit.deit3_small_patch16_224,
    "deit3_base_patch16_224": vit.deit3_base_patch16_224,
    "deit3_large_patch16_224": vit.deit3_large_patch16_224,
    "deit3_small_patch16_384": vit.deit3_small_patch16_384,
    "deit3_base_patch16_384": vit.deit3_base_patch16_384,
    "deit3_large_patch16_384": vit.deit3_large_patch16_384,
    "vit_base_patch32_clip_224": vit.vit_base_patch32_clip_224,
    "vit_base_patch16_clip_224": vit.vit_base_patch16_clip_224,
    "vit_large_patch14_clip_224": vit.vit_large_patch14_clip_224,
    "vit_base_patch32_clip_quickgelu_224": vit.vit_base_patch32_clip_quickgelu_224,
    "vit_base_patch16_clip_quickgelu_224": vit.vit_base_patch16_clip_quickgelu_224,
    "vit_large_patch14_clip_quickgelu_224": vit.vit_large_patch14_clip_quickgelu_224,
    "vit_small_patch14_dinov2": vit.vit_small_patch14_dinov2,
    "vit_base_patch14_dinov2": vit.vit_base_patch14_dinov2,
    "vit_large_patch14_dinov2": vit.vit_large_patch14_dinov2,
    "vit_small_patch14_reg4_dinov2": vit.vit_small_patch14_reg4_dinov2,
    "vit_base_patch14_reg4_dinov2": vit.vit_base_patch14_reg4_dinov2,
    "vit_large_patch14_reg4_dinov2": vit.vit_large_patch14_reg4_dinov2,
    # SigLIP's image towers, attention-pooled, and as timm's `_gap_` networks.
    "vit_base_patch16_siglip_224": vit.vit_base_patch16_siglip_224,
    "vit_base_patch16_siglip_256": vit.vit_base_patch16_siglip_256,
    "vit_base_patch16_siglip_384": vit.vit_base_patch16_siglip_384,
    "vit_base_patch16_siglip_512": vit.vit_base_patch16_siglip_512,
    "vit_large_patch16_siglip_256": vit.vit_large_patch16_siglip_256,
    "vit_large_patch16_siglip_384": vit.vit_large_patch16_siglip_384,
    "vit_so400m_patch14_siglip_224": vit.vit_so400m_patch14_siglip_224,
    "vit_so400m_patch14_siglip_384": vit.vit_so400m_patch14_siglip_384,
    "vit_base_patch16_siglip_gap_224": vit.vit_base_patch16_siglip_gap_224,
    "vit_so400m_patch14_siglip_gap_224": vit.vit_so400m_patch14_siglip_gap_224,
    "vit_so400m_patch14_siglip_gap_384": vit.vit_so400m_patch14_siglip_gap_384,
    # EVA-02 (Fang et al. 2023): ViT with 2-D rotary position embeddings and SwiGLU, timm's names.
    "eva02_tiny_patch14_224": eva.eva02_tiny_patch14_224,
    "eva02_small_patch14_224": eva.eva02_small_patch14_224,
    "eva02_base_patch14_224": eva.eva02_base_patch14_224,
    "eva02_large_patch14_224": eva.eva02_large_patch14_224,
    "eva02_tiny_patch14_336": eva.eva02_tiny_patch14_336,
    "eva02_small_patch14_336": eva.eva02_small_patch14_336,
    "eva02_base_patch14_448": eva.eva02_base_patch14_448,
    "eva02_large_patch14_448": eva.eva02_large_patch14_448,
    # CaiT (Touvron et al. 2021): a deep ViT with LayerScale, talking heads and class attention,
    # timm's names.
    "cait_xxs24_224": cait.cait_xxs24_224,
    "cait_xxs24_384": cait.cait_xxs24_384,
    "cait_xxs36_224": cait.cait_xxs36_224,
    "cait_xxs36_384": cait.cait_xxs36_384,
    "cait_xs24_384": cait.cait_xs24_384,
    "cait_s24_224": cait.cait_s24_224,
    "cait_s24_384": cait.cait_s24_384,
    "cait_s36_384": cait.cait_s36_384,
    "cait_m36_384": cait.cait_m36_384,
    "cait_m48_448": cait.cait_m48_448,
    # PiT (Heo et al. 2021): a ViT whose token map is pooled between stages, timm's names.
    "pit_ti_224": pit.pit_ti_224,
    "pit_xs_224": pit.pit_xs_224,
    "pit_s_224": pit.pit_s_224,
    "pit_b_224": pit.pit_b_224,
    "pit_ti_distilled_224": pit.pit_ti_distilled_224,
    "pit_xs_distilled_224": pit.pit_xs_distilled_224,
    "pit_s_distilled_224": pit.pit_s_distilled_224,
    "pit_b_distilled_224": pit.pit_b_distilled_224,
    # XCiT (El-Nouby et al. 2021): cross-covariance attention over channels, local patch
    # interaction and CaiT's class attention, timm's names.
    "xcit_nano_12_p16_224": xcit.xcit_nano_12_p16_224,
    "xcit_nano_12_p16_384": xcit.xcit_nano_12_p16_384,
    "xcit_tiny_12_p16_224": xcit.xcit_tiny_12_p16_224,
    "xcit_tiny_12_p16_384": xcit.xcit_tiny_12_p16_384,
    "xcit_small_12_p16_224": xcit.xcit_small_12_p16_224,
    "xcit_small_12_p16_384": xcit.xcit_small_12_p16_384,
    "xcit_tiny_24_p16_224": xcit.xcit_tiny_24_p16_224,
    "xcit_tiny_24_p16_384": xcit.xcit_tiny_24_p16_384,
    "xcit_small_24_p16_224": xcit.xcit_small_24_p16_224,
    "xcit_small_24_p16_384": xcit.xcit_small_24_p16_384,
    "xcit_medium_24_p16_224": xcit.xcit_medium_24_p16_224,
    "xcit_medium_24_p16_384": xcit.xcit_medium_24_p16_384,
    "xcit_large_24_p16_224": xcit.xcit_large_24_p16_224,
    "xcit_large_24_p16_384": xcit.xcit_large_24_p16_384,
    "xcit_nano_12_p8_224": xcit.xcit_nano_12_p8_224,
    "xcit_nano_12_p8_384": xcit.xcit_nano_12_p8_384,
    "xcit_tiny_12_p8_224": xcit.xcit_tiny_12_p8_224,
    "xcit_tiny_12_p8_384": xcit.xcit_tiny_12_p8_384,
    "xcit_small_12_p8_224": xcit.xcit_small_12_p8_224,
    "xcit_small_12_p8_384": xcit.xcit_small_12_p8_384,
    "xcit_tiny_24_p8_224": xcit.xcit_tiny_24_p8_224,
    "xcit_tiny_24_p8_384": xcit.xcit_tiny_24_p8_384,
    "xcit_small_24_p8_224": xcit.xcit_small_24_p8_224,
    "xcit_small_24_p8_384": xcit.xcit_small_24_p8_384,
    "xcit_medium_24_p8_224": xcit.xcit_medium_24_p8_224,
    "xcit_medium_24_p8_384": xcit.xcit_medium_24_p8_384,
    "xcit_large_24_p8_224": xcit.xcit_large_24_p8_224,
    "xcit_large_24_p8_384": xcit.xcit_large_24_p8_384,
    # MLP-Mixer, gMixer, ResMLP and gMLP (Tolstikhin et al., Touvron et al., Liu et al. 2021):
    # the patches' tokens mixed by dense layers, timm's names.
    "mixer_s32_224": mlp_mixer.mixer_s32_224,
    "mixer_s16_224": mlp_mixer.mixer_s16_224,
    "mixer_b32_224": mlp_mixer.mixer_b32_224,
    "mixer_b16_224": mlp_mixer.mixer_b16_224,
    "mixer_l32_224": mlp_mixer.mixer_l32_224,
    "mixer_l16_224": mlp_mixer.mixer_l16_224,
    "gmixer_12_224": mlp_mixer.gmixer_12_224,
    "gmixer_24_224": mlp_mixer.gmixer_24_224,
    "resmlp_12_224": mlp_mixer.resmlp_12_224,
    "resmlp_24_224": mlp_mixer.resmlp_24_224,
    "resmlp_36_224": mlp_mixer.resmlp_36_224,
    "resmlp_big_24_224": mlp_mixer.resmlp_big_24_224,
    "gmlp_ti16_224": mlp_mixer.gmlp_ti16_224,
    "gmlp_s16_224": mlp_mixer.gmlp_s16_224,
    "gmlp_b16_224": mlp_mixer.gmlp_b16_224,
    # BEiT and BEiT v2 (Bao et al. 2021, Peng et al. 2022): ViT with a relative position bias.
    "beit_base_patch16_224": beit.beit_base_patch16_224,
    "beit_base_patch16_384": beit.beit_base_patch16_384,
    "beit_large_patch16_224": beit.beit_large_patch16_224,
    "beit_large_patch16_384": beit.beit_large_patch16_384,
    "beit_large_patch16_512": beit.beit_large_patch16_512,
    "beitv2_base_patch16_224": beit.beitv2_base_patch16_224,
    "beitv2_large_patch16_224": beit.beit_large_patch16_224,  # the same network
    # Swin Transformer (Liu et al. 2021), timm's names, and torchvision's for the same networks.
    "swin_tiny_patch4_window7_224": swin.swin_tiny_patch4_window7_224,
    "swin_small_patch4_window7_224": swin.swin_small_patch4_window7_224,
    "swin_base_patch4_window7_224": swin.swin_base_patch4_window7_224,
    "swin_t": swin.swin_tiny_patch4_window7_224,
    "swin_s": swin.swin_small_patch4_window7_224,
    "swin_b": swin.swin_base_patch4_window7_224,
    # Swin Transformer V2 (Liu et al. 2022): post-norm, cosine attention, continuous bias.
    "swinv2_tiny_window8_256": swinv2.swinv2_tiny_window8_256,
    "swinv2_tiny_window16_256": swinv2.swinv2_tiny_window16_256,
    "swinv2_small_window8_256": swinv2.swinv2_small_window8_256,
    "swinv2_small_window16_256": swinv2.swinv2_small_window16_256,
    "swinv2_base_window8_256": swinv2.swinv2_base_window8_256,
    "swinv2_base_window16_256": swinv2.swinv2_base_window16_256,
    "swinv2_base_window12_192": swinv2.swinv2_base_window12_192,
    "swinv2_large_window12_192": swinv2.swinv2_large_window12_192,
    "swinv2_base_window12to16_192to256": swinv2.swinv2_base_window12to16_192to256,
    "swinv2_base_window12to24_192to384": swinv2.swinv2_base_window12to24_192to384,
    "swinv2_large_window12to16_192to256": swinv2.swinv2_large_window12to16_192to256,
    "swinv2_large_window12to24_192to384": swinv2.swinv2_large_window12to24_192to384,
    # PVT v2 (Wang et al. 2022): overlapping patch embeddings, spatial-reduction attention.
    "pvt_v2_b0": pvt_v2.pvt_v2_b0,
    "pvt_v2_b1": pvt_v2.pvt_v2_b1,
    "pvt_v2_b2": pvt_v2.pvt_v2_b2,
    "pvt_v2_b2_li": pvt_v2.pvt_v2_b2_li,
    "pvt_v2_b3": pvt_v2.pvt_v2_b3,
    "pvt_v2_b4": pvt_v2.pvt_v2_b4,
    "pvt_v2_b5": pvt_v2.pvt_v2_b5,
    # TinyViT (Wu et al. 2022): MBConv stem stage, window attention with per-offset head biases.
    "tiny_vit_5m_224": tiny_vit.tiny_vit_5m_224,
    "tiny_vit_11m_224": tiny_vit.tiny_vit_11m_224,
    "tiny_vit_21m_224": tiny_vit.tiny_vit_21m_224,
    "tiny_vit_21m_384": tiny_vit.tiny_vit_21m_384,
    "tiny_vit_21m_512": tiny_vit.tiny_vit_21m_512,
    # LeViT (Graham et al. 2021): convolutional stem, attention with per-offset biases and
    # BatchNormed projections, subsampling attention between stages, two averaged heads.
    "levit_128s": levit.levit_128s,
    "levit_128": levit.levit_128,
    "levit_192": levit.levit_192,
    "levit_256": levit.levit_256,
    "levit_384": levit.levit_384,
    # EfficientFormer (Li et al. 2022): pooling blocks, then attention blocks with per-offset
    # head biases in the last stage; a distillation head beside the classifier.
    "efficientformer_l1": efficientformer.efficientformer_l1,
    "efficientformer_l3": efficientformer.efficientformer_l3,
    "efficientformer_l7": efficientformer.efficientformer_l7,
    # EfficientFormerV2 (Li et al. 2022): convolutional stages, attention with talking heads in
    # the last two, a strided attention downsampling; a distillation head.
    "efficientformerv2_s0": efficientformer_v2.efficientformerv2_s0,
    "efficientformerv2_s1": efficientformer_v2.efficientformerv2_s1,
    "efficientformerv2_s2": efficientformer_v2.efficientformerv2_s2,
    "efficientformerv2_l": efficientformer_v2.efficientformerv2_l,
    # MIT's EfficientViT (Cai et al. 2023): MBConv stages, multi-scale ReLU linear attention in
    # the last ones; B series (Hardswish) and L series (GELU, fused blocks first).
    "efficientvit_b0": efficientvit_mit.efficientvit_b0,
    "efficientvit_b1": efficientvit_mit.efficientvit_b1,
    "efficientvit_b2": efficientvit_mit.efficientvit_b2,
    "efficientvit_b3": efficientvit_mit.efficientvit_b3,
    "efficientvit_l1": efficientvit_mit.efficientvit_l1,
    "efficientvit_l2": efficientvit_mit.efficientvit_l2,
    "efficientvit_l3": efficientvit_mit.efficientvit_l3,
    # MSRA's EfficientViT (Liu et al. 2023): depthwise/FFN sandwiches around cascaded group
    # attention in windows, LeViT-like per-offset biases.
    "efficientvit_m0": efficientvit_msra.efficientvit_m0,
    "efficientvit_m1": efficientvit_msra.efficientvit_m1,
    "efficientvit_m2": efficientvit_msra.efficientvit_m2,
    "efficientvit_m3": efficientvit_msra.efficientvit_m3,
    "efficientvit_m4": efficientvit_msra.efficientvit_m4,
    "efficientvit_m5": efficientvit_msra.efficientvit_m5,
    # MaxViT (Tu et al. 2022), timm's ports of the TensorFlow weights (TF's padding and epsilon).
    "maxvit_tiny_tf_224": maxvit.maxvit_tiny_tf_224,
    "maxvit_tiny_tf_384": maxvit.maxvit_tiny_tf_384,
    "maxvit_tiny_tf_512": maxvit.maxvit_tiny_tf_512,
    "maxvit_small_tf_224": maxvit.maxvit_small_tf_224,
    "maxvit_small_tf_384": maxvit.maxvit_small_tf_384,
    "maxvit_small_tf_512": maxvit.maxvit_small_tf_512,
    "maxvit_base_tf_224": maxvit.maxvit_base_tf_224,
    "maxvit_base_tf_384": maxvit.maxvit_base_tf_384,
    "maxvit_base_tf_512": maxvit.maxvit_base_tf_512,
    "maxvit_large_tf_224": maxvit.maxvit_large_tf_224,
    "maxvit_large_tf_384": maxvit.maxvit_large_tf_384,
    "maxvit_large_tf_512": maxvit.maxvit_large_tf_512,
    "maxvit_xlarge_tf_224": maxvit.maxvit_xlarge_tf_224,
    "maxvit_xlarge_tf_384": maxvit.maxvit_xlarge_tf_384,
    "maxvit_xlarge_tf_512": maxvit.maxvit_xlarge_tf_512,
    # EfficientNet B0-B7 (Tan & Le 2019), timm's names: its own weights' conventions (symmetric
    # padding, BatchNorm epsilon 1e-5), and the TF checkpoints' ('SAME', 1e-3) as `tf_`.
    **{
        f"{prefix}efficientnet_b{i}": getattr(efficientnet, f"{prefix}efficientnet_b{i}")
        for prefix in ("", "tf_")
        for i in range(8)
    },
    # EfficientNetV2 (Tan & Le 2021): timm's own conventions, the TF checkpoints' (`tf_`), and
    # torchvision's names (symmetric padding, BatchNorm epsilon 1e-3).
    "efficientnetv2_s": efficientnet.efficientnetv2_s,
    "efficientnetv2_m": efficientnet.efficientnetv2_m,
    "efficientnetv2_l": efficientnet.efficientnetv2_l,
    "tf_efficientnetv2_s": efficientnet.tf_efficientnetv2_s,
    "tf_efficientnetv2_m": efficientnet.tf_efficientnetv2_m,
    "tf_efficientnetv2_l": efficientnet.tf_efficientnetv2_l,
    "efficientnet_v2_s": efficientnet.efficientnet_v2_s,
    "efficientnet_v2_m": efficientnet.efficientnet_v2_m,
    "efficientnet_v2_l": efficientnet.efficientnet_v2_l,
    # GhostNet (Han et al. 2020) and GhostNetV2 (Tang et al. 2022), timm's names.
    "ghostnet_100": ghostnet.ghostnet_100,
    "ghostnetv2_100": ghostnet.ghostnetv2_100,
    "ghostnetv2_130": ghostnet.ghostnetv2_130,
    "ghostnetv2_160": ghostnet.ghostnetv2_160,
    # ReXNet (Han et al. 2021), timm's names; rexnetr_* round widths to 8 (16).
    "rexnet_100": rexnet.rexnet_100,
    "rexnet_130": rexnet.rexnet_130,
    "rexnet_150": rexnet.rexnet_150,
    "rexnet_200": rexnet.rexnet_200,
    "rexnet_300": rexnet.rexnet_300,
    "rexnetr_100": rexnet.rexnetr_100,
    "rexnetr_130": rexnet.rexnetr_130,
    "rexnetr_150": rexnet.rexnetr_150,
    "rexnetr_200": rexnet.rexnetr_200,
    "rexnetr_300": rexnet.rexnetr_300,
    # HRNet (Wang et al. 2019), timm's classification networks and names.
    "hrnet_w18_small": hrnet.hrnet_w18_small,
    "hrnet_w18_small_v2": hrnet.hrnet_w18_small_v2,
    "hrnet_w18": hrnet.hrnet_w18,
    "hrnet_w30": hrnet.hrnet_w30,
    "hrnet_w32": hrnet.hrnet_w32,
    "hrnet_w40": hrnet.hrnet_w40,
    "hrnet_w44": hrnet.hrnet_w44,
    "hrnet_w48": hrnet.hrnet_w48,
    "hrnet_w64": hrnet.hrnet_w64,
    "hrnet_w18_ssld": hrnet.hrnet_w18_ssld,
    "hrnet_w48_ssld": hrnet.hrnet_w48_ssld,
    # MobileNetV4's convolutional networks (Qin et al. 2024), timm's names and conventions.
    "mobilenetv4_conv_small": mobilenet_v4.mobilenetv4_conv_small,
    "mobilenetv4_conv_small_050": mobilenet_v4.mobilenetv4_conv_small_050,
    "mobilenetv4_conv_small_035": mobilenet_v4.mobilenetv4_conv_small_035,
    "mobilenetv4_conv_medium": mobilenet_v4.mobilenetv4_conv_medium,
    "mobilenetv4_conv_large": mobilenet_v4.mobilenetv4_conv_large,
    "mobilenetv4_hybrid_medium": mobilenet_v4.mobilenetv4_hybrid_medium,
    "mobilenetv4_hybrid_large": mobilenet_v4.mobilenetv4_hybrid_large,
    # MobileViT (Mehta & Rastegari 2022), timm's names.
    "mobilevit_xxs": mobilevit.mobilevit_xxs,
    "mobilevit_xs": mobilevit.mobilevit_xs,
    "mobilevit_s": mobilevit.mobilevit_s,
    "mobilevitv2_050": mobilevit.mobilevitv2_050,
    "mobilevitv2_075": mobilevit.mobilevitv2_075,
    "mobilevitv2_100": mobilevit.mobilevitv2_100,
    "mobilevitv2_125": mobilevit.mobilevitv2_125,
    "mobilevitv2_150": mobilevit.mobilevitv2_150,
    "mobilevitv2_175": mobilevit.mobilevitv2_175,
    "mobilevitv2_200": mobilevit.mobilevitv2_200,
    # MetaFormer (Yu et al. 2022, 2023): PoolFormer, PoolFormerV2, ConvFormer, CAFormer, timm's
    # names and conventions.
    "poolformer_s12": metaformer.poolformer_s12,
    "poolformer_s24": metaformer.poolformer_s24,
    "poolformer_s36": metaformer.poolformer_s36,
    "poolformer_m36": metaformer.poolformer_m36,
    "poolformer_m48": metaformer.poolformer_m48,
    "poolformerv2_s12": metaformer.poolformerv2_s12,
    "poolformerv2_s24": metaformer.poolformerv2_s24,
    "poolformerv2_s36": metaformer.poolformerv2_s36,
    "poolformerv2_m36": metaformer.poolformerv2_m36,
    "poolformerv2_m48": metaformer.poolformerv2_m48,
    "convformer_s18": metaformer.convformer_s18,
    "convformer_s36": metaformer.convformer_s36,
    "convformer_m36": metaformer.convformer_m36,
    "convformer_b36": metaformer.convformer_b36,
    "caformer_s18": metaformer.caformer_s18,
    "caformer_s36": metaformer.caformer_s36,
    "caformer_m36": metaformer.caformer_m36,
    "caformer_b36": metaformer.caformer_b36,
    # InceptionNeXt (Yu et al. 2024): ConvNeXt's stages with an Inception depthwise token
    # mixer, BatchNorm and an MLP head; timm's names.
    "inception_next_atto": inception_next.inception_next_atto,
    "inception_next_tiny": inception_next.inception_next_tiny,
    "inception_next_small": inception_next.inception_next_small,
    "inception_next_base": inception_next.inception_next_base,
    # MambaOut (Yu & Wang 2024): MetaFormer's stages of Gated CNN blocks (a depthwise 7x7 on
    # part of the gated MLP's channels), an MLP head; timm's names, its `_rw` experiments too.
    "mambaout_femto": mambaout.mambaout_femto,
    "mambaout_kobe": mambaout.mambaout_kobe,
    "mambaout_tiny": mambaout.mambaout_tiny,
    "mambaout_small": mambaout.mambaout_small,
    "mambaout_base": mambaout.mambaout_base,
    "mambaout_small_rw": mambaout.mambaout_small_rw,
    "mambaout_base_short_rw": mambaout.mambaout_base_short_rw,
    "mambaout_base_tall_rw": mambaout.mambaout_base_tall_rw,
    "mambaout_base_wide_rw": mambaout.mambaout_base_wide_rw,
    "mambaout_base_plus_rw": mambaout.mambaout_base_plus_rw,
    # NFNets (Brock et al. 2021): normalizer-free, weight-standardised convolutions; DeepMind's
    # NFNet-F (TensorFlow padding, gamma-scaled GELU, skip-init) and timm's light SiLU ones.
    "dm_nfnet_f0": nfnet.dm_nfnet_f0,
    "dm_nfnet_f1": nfnet.dm_nfnet_f1,
    "dm_nfnet_f2": nfnet.dm_nfnet_f2,
    "dm_nfnet_f3": nfnet.dm_nfnet_f3,
    "dm_nfnet_f4": nfnet.dm_nfnet_f4,
    "dm_nfnet_f5": nfnet.dm_nfnet_f5,
    "dm_nfnet_f6": nfnet.dm_nfnet_f6,
    "nfnet_l0": nfnet.nfnet_l0,
    "eca_nfnet_l0": nfnet.eca_nfnet_l0,
    "eca_nfnet_l1": nfnet.eca_nfnet_l1,
    "eca_nfnet_l2": nfnet.eca_nfnet_l2,
}


# Constructor fields that were renamed: the old name is refused with what to write instead.
RENAMED_FIELDS = {
    "drop_path_keep_prob": "Slim's drop_path_keep_prob is now drop_path_rate = 1 - keep "
    "probability, stochastic depth's one name in every family",
}


def constructor_fields(name: str) -> list[str]:
    """The constructor fields a network accepts as `get_network_fn` keyword arguments."""
    module_cls = networks_map[name].func
    return [
        f.name
        for f in dataclasses.fields(module_cls)
        if f.init and f.name not in ("parent", "name")
    ]


@dataclasses.dataclass(frozen=True)
class NetworkFn:
    """A network with its shared arguments bound: `is_training` and `weight_decay`.

    `apply` returns `(logits, end_points)` (plus flax's updated collections when `mutable=` is
    given). In training mode BatchNorm uses batch statistics, so pass `mutable=['batch_stats']`,
    and dropout needs `rngs={'dropout': key}`.
    """

    name: str
    module: nn.Module
    is_training: bool
    weight_decay: float
    pretrained: Any = (
        None  # `nets_weights.Pretrained` from `load_pretrained`: what inputs they expect
    )

    @property
    def default_image_size(self) -> int:
        """The module's (a class constant, or a field where variants differ: EfficientNet's)."""
        return self.module.default_image_size

    @property
    def min_image_size(self) -> int:
        """The smallest height and width `apply` accepts in this mode (`init` and training may
        need more: an auxiliary head's pool)."""
        return self._min_size(self.is_training)

    @property
    def max_image_size(self) -> int | None:
        """The largest height and width a network made for one size takes (MLP-Mixers' token
        mixing, EfficientFormers' attention biases); None for the others, which take any."""
        return getattr(self.module, "max_image_size", None)

    def _min_size(self, train: bool) -> int:
        size = getattr(self.module, "min_image_size", 1)
        return getattr(self.module, "min_train_image_size", size) if train else size

    def init(self, rng: jax.Array, images: jax.Array) -> dict[str, Any]:
        """Creates every variable (auxiliary heads included) from `images` [batch, h, w, c].
        Compiled, as one computation: eager initialisation dispatches every layer's ops one by
        one (efficientnet_b0: 42 s eager, a few seconds compiled)."""
        self._check_images(images, train=True)
        with self._size_errors_named(images):
            return self._compiled_init(rng, images)

    @functools.cached_property
    def _compiled_init(self):
        def init(rng, images):
            params_rng, dropout_rng = jax.random.split(rng)
            rngs = {"params": params_rng, "dropout": dropout_rng}
            return self.module.init(rngs, images, train=True)

        return jax.jit(init)

    def apply(self, variables: dict[str, Any], images: jax.Array, **kwargs: Any) -> Any:
        """Runs the network on `images` [batch, h, w, c]; `mutable=`, `rngs=` go to flax.
        Published variables (`load_pretrained`'s) need the conventions they were trained with."""
        self._check_images(images, train=self.is_training)
        nets_weights.published.check(variables, self.module, self.name)
        variables = nets_weights.published.without_mark(variables)
        with self._size_errors_named(images), self._foreign_variables_named(images):
            return self.module.apply(variables, images, train=self.is_training, **kwargs)

    @contextlib.contextmanager
    def _foreign_variables_named(self, images: jax.Array) -> Iterator[None]:
        """Says what variables that do not fit most likely are (another network's, or this one's
        at another class count or fields; the images' channels where only a kernel's input
        channels differ), where flax names only the first parameter."""
        try:
            yield
        except (flax.errors.ScopeParamShapeError, flax.errors.ScopeParamNotFoundError) as error:
            said = str(error).split(" (https://")[0]
            shapes = re.findall(r"shape \(([\d, ]+)\)", said)
            if len(shapes) == 2:  # a kernel of the images' channels that holds others (in_chans)
                expected, received = ([int(n) for n in s.split(",")] for s in shapes)
                channels = images.shape[-1]
                if (
                    len(expected) == 4 == len(received)
                    and expected[2] == channels != received[2]
                    and expected[:2] + expected[3:] == received[:2] + received[3:]
                ):
                    raise ValueError(
                        f"these variables take {received[2]}-channel images ({said}); got "
                        f"images of {channels} channels, shape {tuple(images.shape)}"
                    ) from None
            raise ValueError(
                f"variables that are not {self.name}'s as built here (num_classes="
                f"{self.module.num_classes}): made by another network, or with another "
                f"num_classes or fields? {said}"
            ) from None

    @functools.cached_property
    def feature_info(self) -> tuple[FeatureInfo, ...]:
        """The feature pyramid: each stage's end_point, stride and channels, shallowest first
        (timm's `feature_info`; `nets.features`). Channels come from one abstract trace at the
        default image size (`jax.eval_shape`: no compute, no memory), made once."""
        size = self.default_image_size
        images = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
        rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
        (_, end_points), _ = jax.eval_shape(
            functools.partial(self.module.init_with_output, train=False), rngs, images
        )
        shapes = {name: x.shape for name, x in end_points.items()}
        return pyramid.feature_info(self.module.feature_strides(), shapes)

    def features(
        self,
        variables: dict[str, Any],
        images: jax.Array,
        names: Sequence[str] | str | None = None,
        **kwargs: Any,
    ) -> Any:
        """The feature pyramid's maps `{end_point: [batch, h, w, c]}` for `images`, all levels of
        `feature_info` or those `names` (or that one); transformers' token sequences become maps
        on the patch grid. With `mutable=`, `(maps, updated collections)`, as `apply`.

        The layers after the deepest level still run (under `jax.jit`, XLA drops those whose
        output nothing uses; in training, BatchNorm statistics keep them alive). For a backbone
        without a classifier, build the network with `num_classes=0`.
        """
        strides = self.module.feature_strides()
        names = list(strides) if names is None else [names] if isinstance(names, str) else names
        for name in names:
            if name not in strides:
                raise ValueError(
                    f"{name!r} is not a level of {self.name}'s feature pyramid; its levels are "
                    f"{', '.join(strides)} (other end_points: apply's second output)"
                )
        out = self.apply(variables, images, **kwargs)
        (_, end_points), updates = out if kwargs.get("mutable") else (out, None)
        maps = {
            name: pyramid.as_map(end_points[name], strides[name], images.shape) for name in names
        }
        return (maps, updates) if kwargs.get("mutable") else maps

    def regularization_loss(self, params: dict[str, Any]) -> jax.Array | float:
        """Slim's L2 penalty: `weight_decay * 0.5 * sum(w**2)` over every conv and dense kernel."""
        if not self.weight_decay:
            return 0.0
        kernels = [
            leaf
            for path, leaf in jax.tree_util.tree_leaves_with_path(params)
            if getattr(path[-1], "key", None) == "kernel"
        ]
        squares = sum(jnp.sum(jnp.square(k.astype(jnp.float32))) for k in kernels)
        return self.weight_decay * 0.5 * squares

    @contextlib.contextmanager
    def _size_errors_named(self, images: jax.Array) -> Iterator[None]:
        """Names the network and the image size when two of its maps disagree in shape (DLA's
        convolutions round an odd map up where its pooled shortcuts floor it, at 112 px as in
        timm's), where JAX's error names neither."""
        try:
            yield
        except TypeError as error:
            if "incompatible shapes" not in str(error):
                raise
            height, width = images.shape[1:3]
            size = self.default_image_size
            strides = getattr(self.module, "feature_strides", lambda: {})()
            hint = (
                f"; multiples of {max(strides.values())}, its deepest stride, keep every map whole"
                if strides
                else ""
            )
            raise ImageSizeError(
                f"{self.name} does not run on {height}x{width} images, where two of its maps "
                f"disagree ({str(error).rstrip('.')}); its default size is {size}x{size}{hint}"
            ) from error

    def _check_images(self, images: jax.Array, train: bool) -> None:
        """Refuses, before anything is traced, images that are not a batch or that are smaller
        than the network's layers allow (they would fail deep inside JAX, or give empty maps),
        or larger where its layers are made for one size (`max_image_size`: MLP-Mixers' token
        mixing, EfficientFormers' attention biases)."""
        size = self.default_image_size
        expected = (
            f"{self.name} expects images of shape [batch, height, width, channels], "
            f"e.g. [8, {size}, {size}, 3]; got shape {tuple(images.shape)}"
        )
        if len(images.shape) != 4:
            raise ValueError(expected)
        if images.shape[1] <= 4 < min(images.shape[2:]):  # [8, 3, 224, 224]: a few rows, wide
            raise ValueError(
                f"{expected}, which looks channels-first (PyTorch's [batch, channels, height, "
                f"width]): images.transpose(0, 2, 3, 1) puts the channels last"
            )
        smallest = self._min_size(train)
        largest = self.max_image_size
        height, width = images.shape[1:3]
        if (
            largest is not None
            and not smallest <= min(height, width) <= max(height, width) <= largest
        ):
            sizes = f"{smallest}" if smallest == largest else f"{smallest} to {largest}"
            raise ImageSizeError(
                f"{self.name} takes images of {sizes} pixels a side, the size its layers are made "
                f"for; got {height}x{width}. To train at another size, build it with another "
                f"{self.module.resize_with} (published weights fit its default, {size}x{size})"
            )
        if min(height, width) < smallest:
            without_aux = self._min_size(False)
            why = (
                f" to build its auxiliary head ({without_aux} without it, in evaluation)"
                if smallest > without_aux
                else ""
            )
            raise ImageSizeError(
                f"{self.name} needs images of at least {smallest}x{smallest} pixels{why}; got "
                f"{height}x{width} (its default size is {size}x{size})"
            )


def get_network_fn(
    name: str,
    num_classes: int | None,
    weight_decay: float = 0.0,
    is_training: bool = False,
    **kwargs: Any,
) -> NetworkFn:
    """Returns the network `name` with the arguments every network shares bound.

    Args:
      name: a key of `networks_map`.
      num_classes: size of the logits layer; 0 or None drops it and returns pooled features.
      weight_decay: the coefficient of `NetworkFn.regularization_loss`; its only effect.
      is_training: batch statistics and dropout when True, running statistics when False.
      **kwargs: the network's own constructor fields, e.g. `dtype=jnp.bfloat16`.

    Raises:
      ValueError: `name` is not a known network (the message lists close matches), or
        `num_classes` / `weight_decay` is negative, or a field's value is one its network
        refuses (`output_stride=12`; the message starts with `name`).
      TypeError: a keyword is not one of the network's constructor fields, or a shared argument
        has the wrong type (`is_training='False'`, `num_classes='10'`).
    """
    check_shared_arguments(name, num_classes, weight_decay, is_training)
    if name not in networks_map:
        close = closest(name, networks_map)
        hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
        raise ValueError(  # the close matches, not a wall of 533 names
            f"Unknown network {name!r}: {hint}`python -m nets_factory` lists all "
            f"{len(networks_map)} (nets_factory.networks_map)"
        )
    fields = constructor_fields(name)
    unknown = sorted(set(kwargs) - set(fields))
    if unknown:
        close = [m for k in unknown for m in difflib.get_close_matches(k, fields, n=1)]
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        hint = "".join(f" ({RENAMED_FIELDS[k]})" for k in unknown if k in RENAMED_FIELDS) or hint
        raise TypeError(
            f"{name} got unexpected keyword argument(s) {', '.join(map(repr, unknown))}{hint}; "
            f"its constructor fields are: {', '.join(fields)}"
        )
    if kwargs.get("remat"):  # here, not at the first trace inside `init`
        checkpoint_policy(kwargs["remat"])
    num_classes = None if num_classes is None else int(num_classes)
    try:
        module = networks_map[name](num_classes=num_classes, **kwargs)
        if kwargs.get("output_stride") is not None:
            module.feature_strides()  # each family checks its `output_stride` there
    except ValueError as error:  # a field's value its module refuses, here, not at a first trace
        raise ValueError(f"{name}: {error}") from None
    return NetworkFn(
        name=name,
        module=module,
        is_training=bool(is_training),
        weight_decay=float(weight_decay),
    )


def check_shared_arguments(
    name: Any, num_classes: Any, weight_decay: Any, is_training: Any
) -> None:
    """Refuses shared arguments that would fail later inside JAX or silently do something else:
    a string `is_training` (`'False'` is truthy: it would train), a bool or string `num_classes`,
    a negative count or weight decay (a negative loss)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a network name (a str), got {name!r}")
    integral = isinstance(num_classes, numbers.Integral) and not isinstance(num_classes, bool)
    if num_classes is not None and not integral:
        raise TypeError(
            f"num_classes must be an int (0 or None: no logits layer), "
            f"got {type(num_classes).__name__} {num_classes!r}"
        )
    if integral and num_classes < 0:
        raise ValueError(
            f"num_classes must be >= 0 (0 or None: no logits layer), got {num_classes}"
        )
    real = isinstance(weight_decay, numbers.Real) and not isinstance(weight_decay, bool)
    if not real:
        raise TypeError(
            f"weight_decay must be a float, got {type(weight_decay).__name__} {weight_decay!r}"
        )
    if not (math.isfinite(weight_decay) and weight_decay >= 0):
        raise ValueError(f"weight_decay must be a finite number >= 0, got {weight_decay}")
    if not isinstance(is_training, (bool, np.bool_)):
        raise TypeError(
            f"is_training must be True or False, got {type(is_training).__name__} {is_training!r}"
        )


def load_pretrained(
    name: str | None,
    weights: str | Path | None = None,
    num_classes: int | None = None,
    weight_decay: float = 0.0,
    is_training: bool = False,
    rng: jax.Array | None = None,
    *,
    in_chans: int = 3,
    revision: str | None = None,
    local_files_only: bool = False,
    **kwargs: Any,
) -> tuple[NetworkFn, dict[str, Any]]:
    """A network of the registry holding published weights, computing what their source does.

        load_pretrained('resnet50.a1_in1k')                   # timm's name: from the Hub, once
        load_pretrained('hf-hub:timm/resnet50.a1_in1k', revision='main')
        load_pretrained('resnet50', '~/weights/resnet50.a1_in1k')      # a local Hub folder
        load_pretrained('resnet18', 'https://download.pytorch.org/models/resnet18-f37072fd.pth')

    Args:
      name: the network (a registry name, or the source's architecture name where it differs:
        `nets_weights.architectures.ARCHITECTURES`); or, with no `weights`, the weights
        themselves, whose config or catalogue entry names the network. None: the network the
        weights name. The network is built with the conventions the weights were trained with
        (e.g. PyTorch's symmetric padding).
      weights: a `.safetensors` file, a Hugging Face / timm folder (`model.safetensors` and
        `config.json`), a PyTorch file (`.pth`, `.pt`, `.th`, `.pth.tar`: torchvision's, or a
        training checkpoint; read without torch), a Keras Applications `.h5` (needs h5py), or a
        name or URL to download into its standard cache, once: a timm name
        (`resnet50.a1_in1k`), a Hub repository (`hf-hub:timm/resnet50.a1_in1k`, needs the `hub`
        extra), a torchvision, Keras Applications or other catalogued URL (hash-checked).
        `python -m nets_factory NAME` lists the published weights of a network.
      num_classes: None keeps the file's classifier (a file without one, DINOv2's: features);
        another count (or 0: features) replaces it, initialised from `rng`, for fine-tuning.
      in_chans: the channels of the images (timm's `in_chans`): 1 for grayscale, 4 or more for
        multispectral. The file's RGB input convolution is adapted as timm adapts it: summed
        over R, G and B for one channel, R, G, B, R, ... scaled by 3 / in_chans for more.
      revision: a Hub branch, tag or commit to pin.
      local_files_only: use the Hub's cache alone, never the network (as `HF_HUB_OFFLINE=1`).
      **kwargs: other constructor fields (`dtype=jnp.bfloat16`, ...); a field that contradicts
        the weights' convention raises.

    Returns:
      `(network_fn, variables)`: `network_fn.pretrained` says what inputs the weights expect
      (image size, crop fraction, mean/std, interpolation) and names the classes.

    Raises:
      nets_weights.WeightFileError: the weights cannot be found, downloaded or read, or do not
        fit the network (one line).
      ValueError: no published weights load into `name`, or a contradicting field.
    """
    if weights is None:  # the name names the weights
        name, weights = None, name
    file = nets_weights.read(weights, revision, local_files_only)
    source, arch = nets_weights.find(name, file, networks_map)
    kwargs = nets_weights.with_conventions(source, arch, kwargs)
    if num_classes is None:
        num_classes = nets_weights.file_class_count(file, arch)
    network_fn = get_network_fn(arch.network, num_classes, weight_decay, is_training, **kwargs)
    variables, info = nets_weights.initialized(file, source, arch, network_fn, rng, in_chans)
    return dataclasses.replace(network_fn, pretrained=info), variables


def to_nnx(network_fn: NetworkFn, variables: dict[str, Any], seed: int = 0) -> "nets_nnx.Network":
    """`network_fn` with `variables` as a Flax NNX module (`nets_nnx.to_nnx`; `seed` seeds its
    dropout stream). flax.nnx is imported here, on first use: it is 0.4 s of every program's
    start otherwise."""
    import nets_nnx

    return nets_nnx.to_nnx(network_fn, variables, seed)


if __name__ == "__main__":
    # `python -m nets_factory [NAME]`: the listing sits on top of the factory, which hands over
    # to it here (at run time, not at import: the arrows between modules run one way).
    import nets_summary

    nets_summary.main()
