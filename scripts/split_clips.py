#!/usr/bin/env python
"""Cut raw footage into training clips: shots found by PySceneDetect, cut under length rules, written with PyAV.

python scripts/split_clips.py FOOTAGE [MORE ...] --output CLIPS [--detector content|adaptive] [--threshold T]
    [--min-seconds 1] [--max-seconds 10] [--fps 16] [--wan-frames]

Sources are only read. CLIPS/clips.json records where each clip came from; run the same command again to continue
an interrupted run (finished clips are kept, shots are not detected again).
"""
from __future__ import annotations

from _bootstrap import OneLineArgumentParser, run_main  # first: import path, offline mode


def parse_args(argv: list[str] | None = None):
    parser = OneLineArgumentParser(description=__doc__)
    parser.add_argument("inputs", nargs="+", help="video files, or folders of videos (not their sub-folders)")
    parser.add_argument("--output", required=True, help="folder for the clips and clips.json (not a source's folder)")
    parser.add_argument("--detector", choices=("content", "adaptive"), default="content",
                        help="PySceneDetect's ContentDetector (hard cuts) or AdaptiveDetector (fewer false cuts on "
                             "camera motion)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="the detector's threshold (content: 27, mean HSV change; adaptive: 3, change over its "
                             "neighbours'); lower finds more cuts")
    parser.add_argument("--min-shot-frames", type=int, default=15, help="cuts closer than this are merged")
    parser.add_argument("--min-seconds", type=float, default=1.0, help="shorter clips are dropped")
    parser.add_argument("--max-seconds", type=float, default=10.0, help="longer shots are cut into such pieces")
    parser.add_argument("--fps", type=float, default=None, help="output frame rate (default: the source's)")
    parser.add_argument("--wan-frames", action="store_true", help="make every clip 4k+1 frames long (Wan's lengths)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    from modules.dataTools.clips import split_videos
    from modules.dataTools.shots import SplitOptions
    from modules.util.errors import UserError

    options = SplitOptions(detector=args.detector, threshold=args.threshold, min_shot_frames=args.min_shot_frames,
                           min_seconds=args.min_seconds, max_seconds=args.max_seconds, fps=args.fps,
                           wan_frames=args.wan_frames)
    try:
        options.check()
    except ValueError as e:
        raise UserError(f"{e}") from None
    report = split_videos(args.inputs, args.output, options, progress=not args.no_progress)
    print(report.summary())
    return 130 if report.cancelled else 0


if __name__ == "__main__":
    run_main(main)
