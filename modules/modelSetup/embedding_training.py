"""Training a textual-inversion embedding (`embedding` config block): alone (EMBEDDING) or beside a LoRA.

Only the embedding's vectors train; UMT5's weights stay frozen. A caption that holds the placeholder is encoded in
the step, with the vectors as they are now (UMT5 runs forward and backward on it each step, so the text encoder
stays on the train device); every other caption keeps its cached embedding.
"""
from __future__ import annotations

import logging

import torch

from modules.config.train_config import TrainConfig
from modules.model.step_inputs import StepInputs
from modules.model.text_embedding import WanModelEmbedding
from modules.model.WanModel import WanModel
from modules.util.errors import UserError

logger = logging.getLogger(__name__)

STATE_KEY = "embedding.umt5xxl"  # the vectors' name in backups (beside "transformer.…" adapter weights)


class EmbeddingTraining:
    def __init__(self, model: WanModel, config: TrainConfig):
        self.model = model
        self.config = config.embedding
        self.embedding: WanModelEmbedding | None = None

    @property
    def parameter(self) -> torch.nn.Parameter:
        return self.embedding.vectors

    def setup(self) -> list[torch.nn.Parameter]:
        """Create the vectors from `initial_embedding_text`, attach them to the model (samples use them), and
        return them as the trained parameter."""
        config, model = self.config, self.model
        try:
            embedding = WanModelEmbedding.initialized(config.placeholder, config.token_count,
                                                      config.initial_embedding_text, model.tokenizer, model.text_encoder)
        except ValueError as e:
            raise UserError(f"config key 'embedding.initial_embedding_text': {e}: give a word or two") from None
        self._attach(embedding)
        logger.info("embedding %s: %d vector(s) of width %d, started from '%s'", config.placeholder,
                    embedding.token_count, embedding.vectors.shape[1], config.initial_embedding_text)
        return [self.parameter]

    def continue_from(self, loaded: WanModelEmbedding, option: str) -> None:
        """Start from a file's vectors instead (`embedding_weight_path`); the placeholder stays the config's."""
        if loaded.token_count != self.config.token_count:
            raise UserError(f"{option}: the file holds {loaded.token_count} vector(s), but embedding.token_count is "
                            f"{self.config.token_count}: set embedding.token_count to {loaded.token_count}")
        with torch.no_grad():
            self.parameter.copy_(loaded.vectors.to(self.parameter.device))

    def _attach(self, embedding: WanModelEmbedding) -> None:
        embedding.vectors.data = embedding.vectors.data.to(self.model.train_device)
        embedding.vectors.requires_grad_(True)
        self.embedding = embedding
        self.model.text_embedding = embedding

    def check_captions(self, captions: list[str]) -> None:
        """A placeholder no training caption holds would train nothing: say so before the first step."""
        holding = sum(self.embedding.applies_to(c) for c in captions)
        if not holding:
            raise UserError(f"config key 'embedding.placeholder': no training caption holds '{self.config.placeholder}':"
                            " write it into the captions where the concept appears (e.g. 'a photo of "
                            f"{self.config.placeholder} walking')")
        logger.info("embedding %s: %d of %d captions hold it and are encoded in each step (the others stay cached)",
                    self.config.placeholder, holding, len(captions))

    def prompt_embeds(self, inputs: StepInputs) -> torch.Tensor:
        """The batch's prompt embeddings with the rows whose caption holds the placeholder encoded anew, through
        the current vectors (differentiable in them)."""
        captions = inputs.captions
        if captions is None:
            return inputs.prompt_embeds
        rows = [i for i, caption in enumerate(captions) if self.embedding.applies_to(caption)]
        if not rows:
            return inputs.prompt_embeds
        fresh = self.model.encode_with_embedding([captions[i] for i in rows], self.embedding)
        index = torch.tensor(rows, device=inputs.prompt_embeds.device)
        return inputs.prompt_embeds.index_copy(0, index, fresh.to(inputs.prompt_embeds))

    def state(self) -> dict[str, torch.Tensor]:
        return {STATE_KEY: self.parameter.detach().clone()}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Take (and remove) the vectors from a backup's state."""
        if STATE_KEY not in state:
            raise KeyError(f"backup has no weights for '{STATE_KEY}'")
        with torch.no_grad():
            self.parameter.copy_(state.pop(STATE_KEY).to(self.parameter.device, self.parameter.dtype))
