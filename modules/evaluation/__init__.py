"""Evaluation of trained models: video metrics, the encoders they use, the report (scripts/evaluate.py)."""
