"""The old `fp8_base_weights` flag, folded into `base_weight_format` (docs/base_weights.md): one control for how the
frozen transformer's weights are stored."""
from __future__ import annotations

from typing import Any

from modules.util.base_config import ConfigError

OLD_KEY = "fp8_base_weights"
# base_weight_format values the old flag agrees with: float8 storage (BF16 is the default every older saved config
# wrote beside the flag, which then meant FP8).
_FP8_AGREES = ("BF16", "FP8", "FP8_SCALED")


def upgrade_fp8_flag(data: dict[str, Any], path: str = "") -> dict[str, Any]:
    """`data` without `fp8_base_weights`: true becomes base_weight_format FP8 (an FP8 or FP8_SCALED already set stays;
    fp8_scale keeps choosing the scale), false is dropped. True beside another format (INT8_CONVROT) is refused in one
    line naming both keys."""
    if OLD_KEY not in data:
        return data
    prefix = f"{path}." if path else ""
    flag = data[OLD_KEY]
    if not isinstance(flag, bool):
        raise ConfigError(f"config key '{prefix}{OLD_KEY}' (the older spelling of base_weight_format FP8) must be true "
                          f"or false, got {flag!r}: better, remove it and set base_weight_format")
    data = {key: value for key, value in data.items() if key != OLD_KEY}
    if not flag:
        return data
    fmt = data.get("base_weight_format", "BF16")
    if fmt not in _FP8_AGREES:
        raise ConfigError(f"config key '{prefix}{OLD_KEY}' is true (the older spelling of base_weight_format FP8), but "
                          f"'{prefix}base_weight_format' is {fmt!r}: remove {OLD_KEY} (or set base_weight_format FP8)")
    data["base_weight_format"] = "FP8" if fmt == "BF16" else fmt
    return data
