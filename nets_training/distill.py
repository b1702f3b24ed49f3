"""Knowledge distillation (the config's `distill`) inside the train step: the teacher's logits
for a training batch, and the loss a student learns them by (`nets_training.teacher` loads the
teacher)."""

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

import nets_factory


@dataclasses.dataclass(frozen=True)
class Distiller:
    """A teacher in evaluation mode and the loss the student learns it by (`DistillConfig`)."""

    teacher: nets_factory.NetworkFn
    # The student's normalised images as the teacher's weights expect them: x * scale + shift
    # per channel (timm's `normalize_input`: back to [0, 1] pixels, then the teacher's mean, std).
    scale: tuple[float, ...]
    shift: tuple[float, ...]
    image_size: int  # the teacher's input size; the student's images are resized to it
    kind: str  # 'soft' or 'hard'
    temperature: float
    alpha: float  # the teacher's share of the loss
    description: str  # for the run's first line

    def teacher_logits(self, variables: dict, images: jax.Array) -> jax.Array:
        """float32 `[batch, classes]`: the teacher's logits for the student's prepared (augmented,
        mixed, normalised) images, without a gradient."""
        x = images
        if any(s != 1 for s in self.scale) or any(self.shift):
            x = x * jnp.asarray(self.scale, x.dtype) + jnp.asarray(self.shift, x.dtype)
        if x.shape[1:3] != (self.image_size, self.image_size):
            x = jax.image.resize(
                x, (x.shape[0], self.image_size, self.image_size, x.shape[3]), "bilinear"
            )
        logits, _ = self.teacher.apply(variables, x)
        return jax.lax.stop_gradient(logits.astype(jnp.float32))

    def loss(self, student_logits: jax.Array, teacher_logits: jax.Array) -> jax.Array:
        """Per-image `[batch]`: soft, the KL divergence from the teacher's softened distribution
        to the student's times temperature^2 (Hinton et al.; timm's `kl_div(..., 'batchmean')`
        once averaged); hard, the cross-entropy against the teacher's top class (DeiT's)."""
        student_logits = student_logits.astype(jnp.float32)
        if self.kind == "hard":
            top = jnp.argmax(teacher_logits, -1)
            return optax.softmax_cross_entropy_with_integer_labels(student_logits, top)
        t = self.temperature
        log_p = jax.nn.log_softmax(teacher_logits / t)
        log_q = jax.nn.log_softmax(student_logits / t)
        return jnp.sum(jnp.exp(log_p) * (log_p - log_q), -1) * t**2

    def objective(
        self,
        logits: jax.Array,
        end_points: dict,
        labels_loss: Callable[[jax.Array], jax.Array],
        teacher_logits: jax.Array,
    ) -> tuple[jax.Array, jax.Array]:
        """`((1 - alpha) x labels_loss(the labels' logits) + alpha x the teacher's part, that
        part)`: the part the batch mean of `loss` on the logits that learn the teacher
        (`heads`)."""
        labels_logits, student_logits = heads(logits, end_points)
        part = self.loss(student_logits, teacher_logits).mean()
        return (1 - self.alpha) * labels_loss(labels_logits) + self.alpha * part, part


def heads(logits: jax.Array, end_points: dict) -> tuple[jax.Array, jax.Array]:
    """`(the logits that learn the labels, those that learn the teacher)`: a network with a
    distillation head (DeiT's `cls_logits` and `dist_logits`, timm's token distillation) gives
    one to each, any other its logits to both."""
    if "dist_logits" in end_points:
        return end_points["cls_logits"], end_points["dist_logits"]
    return logits, logits
