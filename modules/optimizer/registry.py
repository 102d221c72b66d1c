"""Every optimizer by its config name: a plain dict, nothing registers itself. The `optimizer` enum and the
`optimizer_options` config block are made from it, so a new optimizer is its module plus one line here."""
from __future__ import annotations

import dataclasses
from enum import Enum

from modules.optimizer.adafactor import ADAFACTOR
from modules.optimizer.adamw import ADAMW, ADAMW_8BIT
from modules.optimizer.came import CAME
from modules.optimizer.lion import LION
from modules.optimizer.muon import MUON
from modules.optimizer.prodigy import PRODIGY
from modules.optimizer.schedule_free import ADAMW_SCHEDULE_FREE
from modules.optimizer.spec import OptimizerSpec
from modules.util.base_config import BaseConfig, option

OPTIMIZERS: dict[str, OptimizerSpec] = {spec.name: spec for spec in (
    ADAMW, ADAMW_8BIT, PRODIGY, ADAFACTOR, CAME, LION, ADAMW_SCHEDULE_FREE, MUON,
)}

Optimizer = Enum("Optimizer", {name: name for name in OPTIMIZERS}, module=__name__)

# `optimizer_options.<NAME>`: one typed block per optimizer; only the chosen one's is used.
OptimizerOptions = dataclasses.make_dataclass(
    "OptimizerOptions",
    [(name, spec.options, option(spec.options(), spec.doc)) for name, spec in OPTIMIZERS.items()],
    bases=(BaseConfig,))
OptimizerOptions.__module__ = __name__
OptimizerOptions.__doc__ = "The options of each optimizer, by its name."


def spec_of(optimizer: "Optimizer") -> OptimizerSpec:
    return OPTIMIZERS[optimizer.name]
