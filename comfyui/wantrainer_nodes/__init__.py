"""WanTrainer's ComfyUI nodes: copy this folder into ComfyUI's custom_nodes/ and restart ComfyUI."""
from .embeddings import WanTrainerUMT5Embeddings

NODE_CLASS_MAPPINGS = {"WanTrainerUMT5Embeddings": WanTrainerUMT5Embeddings}
NODE_DISPLAY_NAME_MAPPINGS = {"WanTrainerUMT5Embeddings": "Wan UMT5 embeddings (WanTrainer)"}
