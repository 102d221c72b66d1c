"""How element images enter the two pathways at generation time: the per-element layout and the sampling
options. Training derives them from its dataset config (`WanE2VDataLoader.sampling_options`) and the sampler
consumes them, so they live below both."""
from __future__ import annotations

import dataclasses

from modules.config.e2v_dataset_config import E2VDatasetConfig
from modules.config.train_config import WHITE
from modules.model.layout_frames import SKYREELS_V3_SLOTS, min_num_frames
from modules.util.errors import UserError


@dataclasses.dataclass(frozen=True)
class ElementSpec:
    """How one reference image enters the two pathways (layout order is the list order)."""

    repeat: int = 1
    vae_preprocess: str = "pad_white"
    clip_preprocess: str | None = "pad_white"  # None: left out of CLIP


# A2's roles: main subject, object, background (docs/e2v.md §1–§2).
A2_ELEMENTS = (ElementSpec(1, "pad_white", "pad_white"), ElementSpec(4, "pad_white", "pad_white"),
               ElementSpec(4, "center_crop", "pad_white"))


def dataset_layout(dataset: E2VDatasetConfig) -> list[ElementSpec]:
    """A dataset's elements as the sampler lays them out: layout order, repeats and both pathways' preprocessing."""
    return [ElementSpec(e.vae.repeat, dataset.vae_preprocess(e), dataset.clip_preprocess(e) if e.in_clip else None)
            for e in dataset.layout_order()]


def a2_layout(count: int) -> list[ElementSpec]:
    if not 1 <= count <= 3:
        raise UserError(f"SkyReels-A2's element layout takes 1 to 3 element images, got {count}: give 1 to 3 "
                        "(or a dataset config whose layout has more elements)")
    if count == 1:
        return [A2_ELEMENTS[0]]
    return list(A2_ELEMENTS[:count])


# SkyReels-V3: every reference one latent frame, fitted into the frame with white padding (its resize_ref_images)
V3_ELEMENT = ElementSpec(1, "pad_white", None)


def check_reference_count(count: int, key: str) -> None:
    """SkyReels-V3's layout takes 1 to 4 references (its slot count); a one-line UserError naming `key` otherwise."""
    if not 1 <= count <= SKYREELS_V3_SLOTS:
        raise UserError(f"{key} lists {count} reference images but SkyReels-V3's layout takes 1 to "
                        f"{SKYREELS_V3_SLOTS} (its reference slots): give at most {SKYREELS_V3_SLOTS}")


@dataclasses.dataclass
class E2VSamplingOptions:
    """How element images are laid out and which pathways are used (from the training config)."""

    layout: list[ElementSpec] | None = None  # None: A2's roles for 1-3 elements
    use_vae: bool = True
    use_clip: bool = True
    target_layout: str = "separate"
    clip_resolution: tuple[int, int] = (512, 512)
    background: tuple[int, int, int] = WHITE  # transparent pixels of sample images, as training composites them
    reference_layout: str = "a2"  # a2 | skyreels_v3 (e2v.reference_layout)

    @property
    def appends_references(self) -> bool:
        """SkyReels-V3's layout: references as latent frames after the video's, nothing in the condition channels."""
        return self.reference_layout == "skyreels_v3"

    def specs(self, count: int, key: str = "the sample's elements") -> list[ElementSpec]:
        if self.appends_references:
            check_reference_count(count, key)
            if self.layout is None:
                return [V3_ELEMENT] * count
        elif self.layout is None:
            return a2_layout(count)
        if count > len(self.layout):
            raise UserError(f"{key} lists {count} images but the layout has {len(self.layout)} elements: "
                            f"give at most {len(self.layout)}")
        return self.layout[:count]

    def check_frames(self, frames: int, count: int, frames_key: str = "the sample's frames",
                     elements_key: str = "the sample's elements") -> None:
        """A sample of `count` element images must have frames for its reference frames and at least one generated
        frame: the sampler drops the reference frames, and with none left there is no video to write."""
        if self.appends_references:  # the references follow the video's latents: every frame is video
            self.specs(count, elements_key)
            return
        references = sum(spec.repeat for spec in self.specs(count, elements_key))
        needed = min_num_frames(self.target_layout, references)
        if frames < needed:
            raise UserError(f"{frames_key} is {frames}, but {count} element image(s) take {references} reference "
                            f"frames in the '{self.target_layout}' target layout: set it to at least {needed}")
