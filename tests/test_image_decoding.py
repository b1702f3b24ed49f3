"""Image files as every program reads them (`nets_weights.images.decode`): classify
(`predict.read_images`), train and eval's image folders, `check_images`. 16-bit PNGs keep their
shades, EXIF orientation is applied, empty class folders are refused, and the published weights'
resize and centre crop are torchvision's to the pixel."""

import functools
import math
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from nets_training import check_images, data, sources
from nets_training.config import DataConfig
from nets_weights import predict
from nets_weights.architectures import Pretrained

ORIENTATION = 0x0112  # the EXIF tag


def info(image_size: int, crop_fraction: float = 1.0) -> Pretrained:
    return Pretrained(source="x", file="x", image_size=image_size, crop_fraction=crop_fraction)


def pixels(normalised: np.ndarray, weights: Pretrained) -> np.ndarray:
    """`read_images`' output back in uint8."""
    rgb = normalised * np.asarray(weights.std) + np.asarray(weights.mean)
    return np.round(rgb * 255).astype(np.int64)


def save_png48(path, rgb: np.ndarray) -> None:
    """A 16-bit-per-channel RGB PNG (Pillow reads them but cannot write them)."""
    h, w, _ = rgb.shape
    rows = b"".join(b"\0" + row.astype(">u2").tobytes() for row in rgb)  # filter 0 per row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)  # 16 bits, colour type 2 (RGB)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def save(path, array: np.ndarray, orientation: int | None = None, fmt: str = "PNG") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    exif = Image.Exif()
    if orientation is not None:
        exif[ORIENTATION] = orientation
    Image.fromarray(array).save(path, format=fmt, exif=exif)


def folder(root, train: dict, val: dict):
    """An imagefolder: `{class: {file name: array}}` per split."""
    for split, classes in (("train", train), ("val", val)):
        for name, files in classes.items():
            (root / split / name).mkdir(parents=True, exist_ok=True)
            for file, array in files.items():
                save(root / split / name / file, array)
    return sources.load(DataConfig(name="imagefolder", dir=str(root)))


# ---------------------------------------------------------------------------------------------
# 16-bit PNGs: Pillow's convert("RGB") clips every sample above 255 to white.

SHADES = np.array([[0, 255, 256, 4095], [30000, 32768, 65280, 65535]] * 2, np.uint16)  # 4x4


def test_16_bit_pngs_keep_their_shades_in_classify(tmp_path):
    gray, rgb = tmp_path / "gray16.png", tmp_path / "rgb48.png"
    Image.fromarray(SHADES).save(gray)
    with Image.open(gray) as image:
        assert image.mode == "I;16"  # Pillow reads it as 16-bit; its convert("RGB") clips
    save_png48(rgb, np.stack([SHADES, 65535 - SHADES, SHADES // 2], axis=-1))
    weights = info(4)  # the whole 4x4 image, not resized: the decoded pixels themselves
    out = pixels(predict.read_images([gray, rgb], weights), weights)
    high = SHADES.astype(np.int64) >> 8  # v / 65535 in [0, 1], to 8 bits: the high byte
    np.testing.assert_array_equal(out[0], np.stack([high] * 3, axis=-1))
    np.testing.assert_array_equal(out[1], np.stack([high, 255 - high, SHADES >> 9], axis=-1))


def test_16_bit_pngs_keep_their_shades_in_train_and_eval(tmp_path):
    dark, light = np.full((6, 9), 30000, np.uint16), np.full((6, 9), 50000, np.uint16)
    classes = {"dark": {"0.png": dark}, "light": {"0.png": light}}
    ds = folder(tmp_path, classes, classes)
    cfg = DataConfig(name="imagefolder", crop="resized", flip=True)
    batch = next(data.train_iterator(ds, cfg, 4, 2, seed=0))
    (evals,) = data.eval_batches(ds, cfg, 4, 2)
    for images, labels in ((batch["image"], batch["label"]), (evals["image"], evals["label"])):
        expected = np.where(labels == 0, 30000 >> 8, 50000 >> 8)  # 117, 195; clipped: 255
        np.testing.assert_array_equal(
            images, np.broadcast_to(expected[:, None, None, None], images.shape)
        )


def test_check_images_refuses_pixels_with_no_defined_white_and_passes_16_bit(tmp_path, capsys):
    Image.fromarray(SHADES).save(tmp_path / "gray16.png")
    save_png48(tmp_path / "rgb48.png", np.stack([SHADES] * 3, axis=-1))
    # TIFF's 32-bit float and integer samples, as Pillow opens them whatever the name says.
    Image.fromarray(np.ones((4, 4), np.float32)).save(tmp_path / "float.png", format="TIFF")
    Image.fromarray(np.ones((4, 4), np.int32)).save(tmp_path / "int32.png", format="TIFF")
    assert check_images.main([str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 2 and err.strip() == f"{tmp_path}: 4 images, 2 unreadable"
    for line, name, mode in zip(lines, ("float.png", "int32.png"), ("F", "I"), strict=True):
        assert line.startswith(f"cannot read image {tmp_path / name}: TIFF pixels of mode {mode} ")
        assert line.endswith("have no defined white; save it as an 8- or 16-bit PNG")
    with pytest.raises(ValueError, match=r"^cannot read image .*float\.png: .* no defined white"):
        predict.read_images([tmp_path / "float.png"], info(4))  # classify: the same one line


# ---------------------------------------------------------------------------------------------
# EXIF orientation: phone cameras store the sensor's rows and record how to turn them upright.

STORED = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3) * 3  # 6 wide, 4 tall, distinct
UPRIGHT = {  # the EXIF 2.3 definitions of orientations 1-8, written with numpy
    1: STORED,
    2: STORED[:, ::-1],  # mirrored left-right
    3: STORED[::-1, ::-1],  # turned 180 degrees
    4: STORED[::-1],  # mirrored top-bottom
    5: STORED.transpose(1, 0, 2),  # row 0 is the left side, column 0 the top
    6: np.rot90(STORED, -1),  # turned 90 degrees clockwise: a phone held upright
    7: STORED[::-1, ::-1].transpose(1, 0, 2),  # row 0 is the right side, column 0 the bottom
    8: np.rot90(STORED, 1),  # turned 90 degrees anticlockwise
}


def centre_square(image: np.ndarray) -> np.ndarray:
    """The centred 4x4 of a 6x4 or 4x6 image (an even excess: every convention agrees)."""
    h, w = image.shape[:2]
    return image[(h - 4) // 2 : (h - 4) // 2 + 4, (w - 4) // 2 : (w - 4) // 2 + 4]


def test_exif_orientation_is_applied_in_classify_train_and_eval(tmp_path):
    paths = []
    for orientation in UPRIGHT:
        paths.append(tmp_path / "train" / f"o{orientation}" / "0.png")
        save(paths[-1], STORED, orientation)
        save(tmp_path / "val" / f"o{orientation}" / "0.png", STORED, orientation)
    expected = np.stack([centre_square(UPRIGHT[o]) for o in UPRIGHT])
    weights = info(4)  # the short side is already 4: no resize, only the centre crop
    np.testing.assert_array_equal(pixels(predict.read_images(paths, weights), weights), expected)

    ds = sources.load(DataConfig(name="imagefolder", dir=str(tmp_path)))
    cfg = DataConfig(name="imagefolder", crop="none", flip=False)
    batch = next(data.train_iterator(ds, cfg, 4, 8, seed=0))  # the centre square, not resized
    np.testing.assert_array_equal(batch["image"], expected[batch["label"]])
    crop = functools.partial(predict.crop, info=weights)  # eval.py --weights' crop
    (evals,) = data.eval_batches(ds, cfg, 4, 8, crop=crop)
    np.testing.assert_array_equal(evals["image"], expected[evals["label"]])


def test_a_rotated_phone_jpeg_is_upright_in_eval(tmp_path):
    stored = np.zeros((48, 64, 3), np.uint8)  # the left half red, the right half blue
    stored[:, :32, 0] = stored[:, 32:, 2] = 255
    for split in ("train", "val"):
        for name, orientation in (("plain", 1), ("phone", 6)):
            save(tmp_path / split / name / "0.jpg", stored, orientation, fmt="JPEG")
    ds = sources.load(DataConfig(name="imagefolder", dir=str(tmp_path)))
    cfg = DataConfig(name="imagefolder", crop="resized", flip=False)
    (evals,) = data.eval_batches(ds, cfg, 16, 2)  # the training run's own centre crop
    assert evals["label"].tolist() == [0, 1]  # the classes sorted: phone, plain
    phone, plain = evals["image"]
    # Turned clockwise, the left (red) half is on top; as stored, red is on the left.
    assert (phone[:6, :, 0] > 200).all() and (phone[:6, :, 2] < 50).all()
    assert (phone[-6:, :, 2] > 200).all() and (phone[-6:, :, 0] < 50).all()
    assert (plain[:, :6, 0] > 200).all() and (plain[:, -6:, 2] > 200).all()


# ---------------------------------------------------------------------------------------------
# Empty class folders: torchvision's ImageFolder raises "Found no valid file for the classes X".


def test_an_empty_class_folder_is_refused_in_one_line_naming_it(tmp_path):
    image = np.zeros((4, 4, 3), np.uint8)
    files = {"cat": {"0.png": image}, "dog": {"0.png": image}, "emu": {}, "owl": {}}
    (tmp_path / "train" / "owl").mkdir(parents=True)
    (tmp_path / "train" / "owl" / "notes.txt").write_text("not an image")
    with pytest.raises(sources.DataError) as error:
        folder(tmp_path, files, {"cat": {"0.png": image}})
    assert str(error.value) == (
        f"{tmp_path / 'train'}: no .jpg/.jpeg/.png images in the class folder(s) emu, owl; "
        "add images or remove the folder(s)"
    )
    # val/ may lack a class (its images are still labelled by train/'s classes), or hold none.
    files = {"cat": {"0.png": image}, "dog": {"0.png": image}}
    ds = folder(tmp_path / "ok", files, {"cat": {"0.png": image}, "dog": {}})
    assert (ds.num_classes, len(ds.train), len(ds.eval)) == (2, 2, 1)


# ---------------------------------------------------------------------------------------------
# The published weights' resize and centre crop (classify and eval.py --weights): torchvision's.


def reference_resize(w: int, h: int, size: int) -> tuple[int, int]:
    """torchvision 0.29's torchvision/transforms/functional.py `_compute_resized_output_size`,
    lines 359-381, for an int `size` (timm's and torchvision's eval `Resize(scale_size)`)."""
    short, long = (w, h) if w <= h else (h, w)
    requested_new_short = size
    new_short, new_long = requested_new_short, int(requested_new_short * long / short)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    return new_w, new_h


def reference_crop(image_width: int, image_height: int, crop: int) -> tuple[int, int]:
    """torchvision 0.29's functional.py `center_crop`, lines 577-594: the (left, top) of the crop
    in the original image's coordinates (negative: zero padding)."""
    crop_height = crop_width = crop
    pad_left = pad_top = 0
    if crop_width > image_width or crop_height > image_height:
        padding_ltrb = [
            (crop_width - image_width) // 2 if crop_width > image_width else 0,
            (crop_height - image_height) // 2 if crop_height > image_height else 0,
            (crop_width - image_width + 1) // 2 if crop_width > image_width else 0,
            (crop_height - image_height + 1) // 2 if crop_height > image_height else 0,
        ]
        pad_left, pad_top = padding_ltrb[:2]
        image_width += padding_ltrb[0] + padding_ltrb[2]
        image_height += padding_ltrb[1] + padding_ltrb[3]
        if crop_width == image_width and crop_height == image_height:
            return -pad_left, -pad_top
    crop_top = int(round((image_height - crop_height) / 2.0))
    crop_left = int(round((image_width - crop_width) / 2.0))
    return crop_left - pad_left, crop_top - pad_top


def reference_scale_size(img_size: int, crop_pct: float) -> int:
    """timm's timm/data/transforms_factory.py `transforms_imagenet_eval`, line 319 (aa4b585)."""
    return math.floor(img_size / crop_pct)


SIZES = (7, 8, 9, 10, 13, 224, 225, 227, 229, 256, 333, 375, 427, 500, 640)
PREPROCESSING = (  # (image_size, crop_fraction): timm's, torchvision's presets, tiny, padded
    (224, 0.875),
    (224, 0.9),
    (224, 0.95),
    (224, 224 / 232),  # torchvision's V2 weights: resize 232, crop 224
    (240, 240 / 255),  # torchvision's efficientnet_b1
    (288, 1.0),
    (8, 0.875),
    (7, 0.5),
    (8, 1.25),  # crop_pct > 1: the resized image is smaller than the crop, padded with black
)


@pytest.mark.parametrize("image_size, crop_fraction", PREPROCESSING)
def test_resize_and_crop_box_are_torchvisions(image_size, crop_fraction):
    scale_size = reference_scale_size(image_size, crop_fraction)
    for w in SIZES:
        for h in SIZES:
            resized = reference_resize(w, h, scale_size)
            assert predict.resized_size(w, h, scale_size) == resized, (w, h)
            left, top = reference_crop(*resized, image_size)
            box = (left, top, left + image_size, top + image_size)
            assert predict.crop_box(*resized, image_size) == box, (w, h, resized)


@pytest.mark.parametrize(
    "image, image_size, crop_fraction, resized, box",
    [  # worked by hand from the formulas above
        ((500, 375), 224, 0.875, (341, 256), (58, 16, 282, 240)),  # 341.3 -> 341; 58.5 -> 58
        ((640, 427), 224, 0.875, (383, 256), (80, 16, 304, 240)),  # 383.7 truncated, not 384
        ((227, 300), 224, 224 / 227, (227, 300), (2, 38, 226, 262)),  # 1.5 -> 2, where // gives 1
        ((232, 229), 224, 224 / 229, (232, 229), (4, 2, 228, 226)),  # 4 and 2.5 -> 2
        ((10, 13), 8, 0.875, (9, 11), (0, 2, 8, 10)),  # 11.7 -> 11; 0.5 -> 0, 1.5 -> 2
        ((6, 9), 8, 1.25, (6, 9), (-1, 0, 7, 8)),  # padded by 1 on the left
    ],
)
def test_resize_and_crop_box_worked_examples(image, image_size, crop_fraction, resized, box):
    assert reference_scale_size(image_size, crop_fraction) == min(resized)
    assert predict.resized_size(*image, min(resized)) == resized
    assert predict.crop_box(*resized, image_size) == box


def coordinates(w: int, h: int) -> np.ndarray:
    """An image whose red is its column and green its row: a crop's pixels say where it was."""
    y, x = np.mgrid[:h, :w]
    return np.stack([x * 20, y * 20, np.full_like(x, 7)], axis=-1).astype(np.uint8)


def test_classify_and_eval_crop_the_pixels_torchvision_crops(tmp_path):
    cases = {  # class: (image, crop_fraction, resized (w, h), the crop's left; its top is 0)
        # 11x8, crop 8 of a short side of 8: no resize; the 3 extra columns put the crop at
        # round(1.5) = 2, where `//` put it at 1.
        "a": (coordinates(11, 8), 1.0, (11, 8), 2),
        # 13x10, crop 8 at 0.875: the short side to floor(8 / 0.875) = 9, the long one to
        # int(9 * 13 / 10) = 11 (rounding gave 12); the crop at round(1.5) = 2.
        "b": (coordinates(13, 10), 0.875, (11, 9), 2),
    }
    ds = folder(tmp_path, *[{name: {"0.png": c[0]} for name, c in cases.items()}] * 2)
    for label, (image, fraction, resized, left) in enumerate(cases.values()):
        weights = info(8, fraction)
        expected = Image.fromarray(image).resize(resized, Image.BILINEAR)
        expected = np.asarray(expected.crop((left, 0, left + 8, 8)))
        path = ds.eval.paths[ds.eval.labels.index(label)]
        classified = pixels(predict.read_images([path], weights)[0], weights)
        np.testing.assert_array_equal(classified, expected)
        crop = functools.partial(predict.crop, info=weights)  # eval.py --weights' crop
        (evals,) = data.eval_batches(ds, DataConfig(name="imagefolder"), 8, 2, crop=crop)
        np.testing.assert_array_equal(evals["image"][list(evals["label"]).index(label)], expected)


def test_squash_resizes_both_sides_and_other_crop_modes_are_refused():
    # timm's crop_mode 'squash' (ConvNeXt's and EVA-02's 22k fine-tunes at 384 and 448 px):
    # `Resize((s, s))` with s = floor(size / crop_pct), the aspect ratio not kept, then the
    # centred crop: a 13x10 image at 8 px, crop 0.875 -> 9x9 -> the crop at round(0.5) = 0.
    image = Image.fromarray(coordinates(13, 10))
    weights = Pretrained("x", "x", image_size=8, crop_fraction=0.875, crop_mode="squash")
    expected = np.asarray(image.resize((9, 9), Image.BILINEAR).crop((0, 0, 8, 8)))
    np.testing.assert_array_equal(np.asarray(predict.crop(image, weights)), expected)
    uncropped = Pretrained("x", "x", image_size=8, crop_fraction=1.0, crop_mode="squash")
    expected = np.asarray(image.resize((8, 8), Image.BILINEAR))
    np.testing.assert_array_equal(np.asarray(predict.crop(image, uncropped)), expected)
    border = Pretrained("eva", "x", image_size=8, crop_mode="border")
    with pytest.raises(ValueError, match="eva's weights are evaluated with timm's crop_mode 'bo"):
        predict.crop(image, border)


# ---------------------------------------------------------------------------------------------
# Training's flip: Pillow's for the PIL images that decoding and cropping give, numpy's for arrays.


def photo(h: int = 37, w: int = 53) -> np.ndarray:
    """Gradients and noise: no two columns alike, so a mirrored crop differs from the crop."""
    y, x = np.mgrid[:h, :w]
    noise = np.random.default_rng(0).integers(0, 60, (h, w, 3))
    return np.stack([x * 4, y * 6, (x + y) * 2], axis=-1).astype(np.uint8) + noise.astype(np.uint8)


@pytest.mark.parametrize(
    "record, crop, fixed_size, channels",
    [
        ("file", "resized", False, 3),  # decoded, cropped and flipped as PIL images
        ("file", "none", False, 3),
        (photo(), "resized", True, 3),  # in-memory: flipped as PIL images once cropped
        (photo()[..., :1], "pad", True, 1),  # flipped as arrays
    ],
)
def test_train_flip_mirrors_the_crop_of_half_the_draws(
    tmp_path, record, crop, fixed_size, channels
):
    if isinstance(record, str):
        Image.fromarray(photo()).save(tmp_path / "0.jpg")
        record = str(tmp_path / "0.jpg")
    fields = dict(image_size=24, fixed_size=fixed_size, channels=channels, crop=crop, padding=4)
    plain = data.TrainTransform(**fields, min_area=0.08, flip=False)
    flipping = data.TrainTransform(**fields, min_area=0.08, flip=True)
    mirrored = []
    for seed in range(16):
        image = plain({"image": record, "label": 0}, np.random.default_rng(seed))["image"]
        maybe = flipping({"image": record, "label": 0}, np.random.default_rng(seed))["image"]
        assert maybe.shape == image.shape and image.shape[-1] == channels
        assert maybe.flags.c_contiguous and maybe.dtype == np.uint8
        mirrored.append(not np.array_equal(maybe, image))
        np.testing.assert_array_equal(maybe, image[:, ::-1] if mirrored[-1] else image)
    assert 4 <= sum(mirrored) <= 12  # the same crop, mirrored with probability 1/2
