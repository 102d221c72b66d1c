"""How element images enter the two pathways at generation time: the per-element layout and the sampling
options. Training derives them from its dataset config (`WanE2VDataLoader.sampling_options`) and the sampler
consumes them, so they live below both."""
from __future__ import annotations

import dataclasses

from modules.dataLoader.video_io import WHITE
from modules.util.errors import UserError


@dataclasses.dataclass(frozen=True)
class ElementSpec:
    """How one reference image enters the two pathways (layout order is the list order)."""

    repeat: int = 1
    vae_preprocess: str = "pad_white"
    clip_preprocess: str | None = "pad_white"  # None: left out of CLIP


# A2's roles: main subject, object, background (E2V_SPEC §1–§2).
A2_ELEMENTS = (ElementSpec(1, "pad_white", "pad_white"), ElementSpec(4, "pad_white", "pad_white"),
               ElementSpec(4, "center_crop", "pad_white"))


def a2_layout(count: int) -> list[ElementSpec]:
    if not 1 <= count <= 3:
        raise ValueError(f"A2's layout takes 1 to 3 elements, got {count}")
    if count == 1:
        return [A2_ELEMENTS[0]]
    return list(A2_ELEMENTS[:count])


@dataclasses.dataclass
class E2VSamplingOptions:
    """How element images are laid out and which pathways are used (from the training config)."""

    layout: list[ElementSpec] | None = None  # None: A2's roles for 1-3 elements
    use_vae: bool = True
    use_clip: bool = True
    target_layout: str = "separate"
    clip_resolution: tuple[int, int] = (512, 512)
    background: tuple[int, int, int] = WHITE  # transparent pixels of sample images, as training composites them

    def specs(self, count: int) -> list[ElementSpec]:
        if self.layout is None:
            return a2_layout(count)
        if count > len(self.layout):
            raise UserError(f"{count} element images given but the layout has {len(self.layout)} elements")
        return self.layout[:count]
