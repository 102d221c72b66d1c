"""The guidance-preserving target (training on a CFG- or step-distilled Wan base without undistilling it;
docs/distilled_bases.md): its scale, the unconditional prompt the distiller used, the σ taper and the distilled
timestep set."""
from __future__ import annotations

import dataclasses

from modules.config.limits import MAX_GUIDANCE_SCALE, check_at_most
from modules.util.base_config import BaseConfig, ConfigError, option

#: Wan's own negative prompt (Wan2.1 `shared_config.sample_neg_prompt`): the unconditional text of Wan's CFG, and of
#: distillers that kept it (lightx2v's CFG-distilled models).
WAN_NEGATIVE_PROMPT = ("色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，JPEG压缩残留，"
                       "丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，手指融合，"
                       "静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走")
UNCONDITIONAL_PROMPTS = {"empty": "", "wan_negative": WAN_NEGATIVE_PROMPT}
#: Lightning / lightx2v 4-step timesteps: 1000·σ of shift 5 over σ = 1, 0.75, 0.5, 0.25 (already shifted).
LIGHTNING_4_STEPS = [1000.0, 937.5, 833.3, 625.0]


@dataclasses.dataclass
class GuidancePreservingConfig(BaseConfig):
    """Each step also runs the current model, without gradient, on the same noisy latent with the unconditional
    prompt (u), and fits the conditional output to u + scale·(target − u): the model learns what CFG at `scale`
    would have drawn, so a CFG-distilled base stays usable at CFG 1."""

    scale: float = option(0.0, "The guidance scale the base was distilled at (0 = off: the plain loss and no extra pass; 1 gives exactly the plain loss; e.g. 5 for a CFG-distilled Wan). Costs one forward without gradient per step.")
    unconditional_prompt: str = option("empty", "empty | wan_negative: the text of the unconditional pass, as the distiller used it: the empty prompt, or Wan's own negative prompt (lightx2v's CFG distillation). The image / reference condition (I2V, E2V, VACE) stays in the pass, as CFG at inference keeps it.")
    taper_below_sigma: float = option(0.0, "Below this σ the scale falls linearly to 1 at σ = 0 (guidance decides layout at high noise and only adds artefacts at low noise); 0 = the same scale at every σ.")
    distilled_timesteps: list[float] = option([], "Train only at these timesteps (0 to 1000, σ = t/1000, the schedule's shift already applied, so timestep_shift does not move them), drawn uniformly: the steps a distilled sampler takes, e.g. Lightning's 4 steps [1000, 937.5, 833.3, 625] (shift 5 over 1, 0.75, 0.5, 0.25). Empty = the timestep distribution. On two-expert models each expert draws from the steps in its σ range.")

    def validate(self, path: str) -> None:
        if self.scale < 0:
            raise ConfigError(f"config key '{path}.scale' must not be negative (0 = off), got {self.scale}")
        check_at_most(f"config key '{path}.scale'", self.scale, MAX_GUIDANCE_SCALE,
                      "give the CFG the base was distilled at (about 3 to 8)")
        if self.unconditional_prompt not in UNCONDITIONAL_PROMPTS:
            raise ConfigError(f"config key '{path}.unconditional_prompt' must be one of "
                              f"{', '.join(UNCONDITIONAL_PROMPTS)}, got '{self.unconditional_prompt}'")
        if not 0 <= self.taper_below_sigma <= 1:
            raise ConfigError(f"config key '{path}.taper_below_sigma' must be between 0 and 1, got {self.taper_below_sigma}")
        for t in self.distilled_timesteps:
            if not 0 < t <= 1000:
                raise ConfigError(f"config key '{path}.distilled_timesteps' holds {t}: each must be in (0, 1000] "
                                  "(Lightning's 4 steps: [1000, 937.5, 833.3, 625])")

    @property
    def enabled(self) -> bool:
        """Whether steps run the unconditional pass."""
        return self.scale > 0

    def unconditional_text(self) -> str:
        return UNCONDITIONAL_PROMPTS[self.unconditional_prompt]
