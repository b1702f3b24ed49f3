"""The device's batch augmentation against timm's `Mixup` and `RandomErasing` (fixtures timm's code
wrote: tools/fixtures_augment.py), its draws, and the losses on soft targets."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nets_training import device_augment, steps
from nets_training.config import MixupConfig, OptimConfig

FIXTURES = Path(__file__).parent / "fixtures" / "augment"
MIXUP = np.load(FIXTURES / "mixup.npz")
CASES = sorted({k.rsplit(" ", 1)[0] for k in MIXUP.files if not k.startswith("bbox")})


# One compiled program for every case (they share shapes): no per-case compile of each operation.
mix = jax.jit(lambda x, labels, params: device_augment.mix(x, labels, params, 5, 0.1))


@pytest.mark.parametrize("case", CASES)
def test_given_timms_lam_and_box_the_batch_and_targets_are_timms(case):
    """timm's Mixup (label smoothing 0.1, 5 classes) in each mode; `lam`, `cutmix`, `box` are
    what it drew (tools/fixtures_augment.py records them)."""
    get = lambda name: MIXUP[f"{case} {name}"]  # noqa: E731
    params = device_augment.MixParams(
        jnp.asarray(get("lam")), jnp.asarray(get("cutmix")), jnp.asarray(get("box"), jnp.int32)
    )
    images = get("x").transpose(0, 2, 3, 1)  # timm's NCHW -> NHWC
    mixed, soft = mix(images, get("target"), params)
    np.testing.assert_array_equal(np.asarray(mixed), get("mixed").transpose(0, 2, 3, 1))
    # timm mixes the targets with lam in float64 in 'batch' mode: an ulp of float32 apart.
    np.testing.assert_allclose(np.asarray(soft), get("soft"), rtol=0, atol=1e-7)


def test_cutmix_boxes_from_a_centre_are_timms_rand_bbox():
    for i in range(40):
        h, w, cy, cx, *box = MIXUP[f"bbox {i}"].tolist()
        lam = jnp.float32(MIXUP[f"bbox {i} lam"])
        got, kept = device_augment.centred_box(lam, cy, cx, h, w)
        assert np.asarray(got).tolist() == box, i
        assert np.isclose(kept, 1 - (box[1] - box[0]) * (box[3] - box[2]) / (h * w))


def test_draws_follow_prob_switch_prob_and_the_beta_distribution():
    config = MixupConfig(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.6, switch_prob=0.3, mode="elem")
    draw = jax.jit(lambda key: device_augment.sample(key, config, 4096, 8, 8))
    p = jax.tree.map(np.asarray, draw(jax.random.PRNGKey(0)))
    mixed = (p.lam < 1) | p.cutmix
    assert abs(mixed.mean() - 0.6) < 0.03
    assert abs(p.cutmix[mixed].mean() - 0.3) < 0.03
    blend = p.lam[mixed & ~p.cutmix]  # Beta(0.8, 0.8): mean 1/2, variance 1/(4 * 2.6)
    assert abs(blend.mean() - 0.5) < 0.02 and abs(blend.var() - 1 / 10.4) < 0.01
    kept = p.lam[p.cutmix]  # the kept share of the box's image: 1 - its area
    area = (p.box[p.cutmix, 1] - p.box[p.cutmix, 0]) * (p.box[p.cutmix, 3] - p.box[p.cutmix, 2])
    np.testing.assert_allclose(kept, 1 - area / 64)


def test_a_batch_draws_once_and_a_pair_shares_its_draw(monkeypatch):
    """The modes' plumbing, on a stand-in for the draw (the real one is the test above's)."""

    def draw(key, config, height, width):
        u = jax.random.uniform(key, (2,))
        return device_augment.MixParams(u[0], u[1] < 0.5, jnp.full(4, (u[1] * 8).astype(int)))

    monkeypatch.setattr(device_augment, "_draw", draw)
    modes = ("batch", "pair", "elem")
    sample = jax.jit(
        lambda key: [device_augment.sample(key, MixupConfig(0.8, mode=m), 6, 8, 8) for m in modes]
    )
    batch, pair, elem = jax.tree.map(np.asarray, sample(jax.random.PRNGKey(0)))
    assert len(np.unique(batch.lam)) == 1 and len(np.unique(elem.lam)) == 6
    for leaf in pair:
        np.testing.assert_array_equal(leaf, leaf[::-1])  # example 5 - i takes pair i's draw
    assert len(np.unique(pair.lam)) == 3 and pair.lam[0] == elem.lam[0]  # draw i: fold_in(key, i)


def ks(a, b) -> float:
    """The two-sample Kolmogorov-Smirnov statistic."""
    values = np.union1d(a, b)
    cdf = lambda x: np.searchsorted(np.sort(x), values, side="right") / len(x)  # noqa: E731
    return float(np.abs(cdf(a) - cdf(b)).max())


def erased_boxes(erased: np.ndarray) -> np.ndarray:
    """top, left, h, w of each image's erased (zero) pixels; -1, -1, 0, 0 where none."""
    boxes = []
    for image in erased:
        rows, cols = np.nonzero(image.any(1))[0], np.nonzero(image.any(0))[0]
        if not len(rows):
            boxes.append([-1, -1, 0, 0])
            continue
        boxes.append([rows[0], cols[0], rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1])
    return np.asarray(boxes)


def test_random_erasing_draws_timms_boxes_and_fills():
    """4000 images each way: timm's box sides, places, areas and aspects (one box), and erased
    share (up to 3 boxes), by the Kolmogorov-Smirnov distance (0.044 is p = 0.001 at n = 4000)."""
    timm = np.load(FIXTURES / "erasing.npz")
    height, width = timm["size"].tolist()
    ones = jnp.ones((4000, height, width, 1))
    fill_shape = (64, 12, 12, 3)

    @jax.jit
    def run(key):
        keys = jax.random.split(key, 4)
        return (
            device_augment.erase(ones, keys[0], 0.5, "const", 1) == 0,
            device_augment.erase(ones, keys[1], 0.5, "const", 3) == 0,
            device_augment.erase(jnp.full(fill_shape, 9.0), keys[2], 1.0, "rand", 1),
            device_augment.erase(jnp.full(fill_shape, 9.0), keys[3], 1.0, "pixel", 1),
        )

    one, three, rand, pixel = map(np.asarray, run(jax.random.PRNGKey(0)))
    ours, theirs = erased_boxes(one[..., 0]), timm["boxes"]
    assert abs((ours[:, 0] >= 0).mean() - (theirs[:, 0] >= 0).mean()) < 0.03
    ours, theirs = ours[ours[:, 0] >= 0], theirs[theirs[:, 0] >= 0]
    for j, name in enumerate(("top", "left", "height", "width")):
        assert ks(ours[:, j], theirs[:, j]) < 0.06, name
    assert ks(ours[:, 2] * ours[:, 3], theirs[:, 2] * theirs[:, 3]) < 0.06
    assert ks(ours[:, 2] / ours[:, 3], theirs[:, 2] / theirs[:, 3]) < 0.06
    assert ks(three[..., 0].mean((1, 2)), timm["erased_share_count3"]) < 0.044
    boxes = [(image, image[..., 0] != 9) for image in rand]  # some find no box that fits
    assert sum(box.any() for _, box in boxes) > 32
    for image, box in boxes:  # one N(0, 1) colour per box
        assert all(len(np.unique(image[box][:, c])) <= 1 for c in range(3))
    erased = pixel[pixel != 9]
    assert abs(erased.mean()) < 0.05 and abs(erased.std() - 1) < 0.05


def test_losses_on_soft_targets_are_timms():
    logits = jax.random.normal(jax.random.PRNGKey(0), (4, 6))
    targets = jax.nn.softmax(jax.random.normal(jax.random.PRNGKey(1), (4, 6)))
    log_p = jax.nn.log_softmax(logits)
    ce = steps.make_loss(OptimConfig())(logits, targets)
    np.testing.assert_allclose(ce, -(targets * log_p).sum(-1), rtol=1e-6)  # SoftTargetCE
    bce = lambda t: -(t * jax.nn.log_sigmoid(logits) + (1 - t) * jax.nn.log_sigmoid(-logits))  # noqa: E731
    mean = steps.make_loss(OptimConfig(loss="bce"))(logits, targets)
    np.testing.assert_allclose(mean, bce(targets).mean(-1), rtol=1e-5)
    summed = OptimConfig(loss="bce", bce_target_threshold=0.2, bce_sum=True)
    binary = (targets > 0.2).astype(jnp.float32)
    np.testing.assert_allclose(
        steps.make_loss(summed)(logits, targets), bce(binary).sum(-1), rtol=1e-5
    )
