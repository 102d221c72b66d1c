"""What a finished run must say besides its output paths: every part of the work it skipped (clips, preview samples,
steps, a backup), one line each. The log gets them as warnings; a GUI shows them at the end, not only in the log."""
from __future__ import annotations

from modules.dataLoader.skips import SkipCounter


def end_warnings(skips: SkipCounter, sample_failures: list[str], samples_tried: int, nonfinite_steps: int,
                 backup_failure: str | None) -> list[str]:
    warnings = []
    if len(skips):
        warnings.append(f"training data: {skips.summary()} (the log names each file)")
    if sample_failures:
        share = (f"every preview sample ({samples_tried}) was skipped" if len(sample_failures) == samples_tried
                 else f"{len(sample_failures)} of {samples_tried} preview samples were skipped")
        warnings.append(f"{share}: {sample_failures[0]}" + (" (the log has the others)" if len(sample_failures) > 1
                                                            else ""))
    if nonfinite_steps:
        warnings.append(f"{nonfinite_steps} steps were skipped for a NaN/inf loss")
    if backup_failure:
        warnings.append(f"the model was written, but the backup failed: {backup_failure}")
    return warnings
