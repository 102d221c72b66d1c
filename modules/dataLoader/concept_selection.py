"""Which concepts a run trains on or measures, with no model and no heavy imports: the loader's choice and the
start-up check (scripts/train.py runs it before the trainer is imported) are this one function."""
from __future__ import annotations

from pathlib import Path

from modules.config.loading import load_concepts
from modules.config.train_config import ConceptConfig, TrainConfig
from modules.util.enum import ConceptType
from modules.util.errors import UserError


def concepts_of_type(config: TrainConfig, concept_type: ConceptType) -> list[ConceptConfig]:
    """The enabled concepts of `concept_type`; none to train on (e.g. only VALIDATION ones) is a one-line
    UserError, which the trainer's start-up check raises before any model loads."""
    concepts = load_concepts(config.concepts) if isinstance(config.concepts, str) else config.concepts
    enabled = [c for c in concepts if c.enabled and c.type == concept_type]
    if not enabled and concept_type == ConceptType.STANDARD:
        raise UserError("config key 'concepts' has no enabled concept to train on (type STANDARD): add "
                        "{\"path\": \"my_dataset\"} or set a concept's type to STANDARD")
    return enabled


def check_concepts(config: TrainConfig) -> None:
    concepts_of_type(config, ConceptType.STANDARD)


def concept_path_problem(path: str) -> str:
    """What is wrong with a concept's path (a folder of clips, or a .jsonl manifest), "" when it is there: the loader
    refuses it with this, and the GUI shows it beside the field while it is typed."""
    if not Path(path).exists():
        return f"'{path}' does not exist: give a folder of clips or a .jsonl manifest"
    return ""
