"""The synthetic kit: tiny random Wan models, the tiny trained VAE, its tokenizer, shape clips, synthetic datasets and
the shapes recipe. Tests, the demo, benchmarks and tools import it; the product's own code paths never do (the
import-layer test holds that), so nothing a user trains on can reach a toy by accident."""
