"""Frame windows of a clip (frame_sample_strategy): which windows each strategy gives, scene cuts."""
from __future__ import annotations

import random

import numpy as np

from modules.dataLoader.windows import FrameWindow, WindowOptions, detect_cuts, plan_windows, random_start
from modules.util.enum import FrameSampleStrategy as S

TEN_SECONDS = 161  # frames of a 10 s clip at 16 fps (t = 0 ... 10 s)


def starts(windows: list[FrameWindow]) -> list[int | None]:
    return [w.start for w in windows]


def test_each_strategy_on_a_ten_second_clip():
    assert plan_windows(TEN_SECONDS, 17, WindowOptions(S.HEAD)) == [FrameWindow(0, 17)]
    slide = plan_windows(TEN_SECONDS, 17, WindowOptions(S.SLIDE, stride=17))
    assert starts(slide) == [0, 17, 34, 51, 68, 85, 102, 119, 136]  # 9 chunks; frames 153-160 are too few
    assert starts(plan_windows(TEN_SECONDS, 17, WindowOptions(S.SLIDE, stride=8)))[:3] == [0, 8, 16]
    assert starts(plan_windows(TEN_SECONDS, 17, WindowOptions(S.UNIFORM, count=4))) == [0, 48, 96, 144]
    assert plan_windows(TEN_SECONDS, 17, WindowOptions(S.FULL, max_frames=161)) == [FrameWindow(0, 161)]
    assert plan_windows(TEN_SECONDS, 17, WindowOptions(S.FULL, max_frames=81)) == [FrameWindow(0, 81)]
    assert plan_windows(TEN_SECONDS, 17, WindowOptions(S.RANDOM)) == [FrameWindow(None, 17)]
    # the last window of every strategy ends inside the clip
    for options in (WindowOptions(S.SLIDE, stride=5), WindowOptions(S.UNIFORM, count=7)):
        assert all(w.start + w.frames <= TEN_SECONDS for w in plan_windows(TEN_SECONDS, 33, options))


def test_short_clips_give_the_largest_window_they_hold_whatever_the_strategy():
    for strategy in S:
        assert plan_windows(12, 17, WindowOptions(strategy)) == [FrameWindow(0, 9)], strategy
    assert plan_windows(0, 17, WindowOptions()) == []
    assert starts(plan_windows(19, 17, WindowOptions(S.UNIFORM, count=4))) == [0, 1, 2]  # no duplicate windows


def test_random_starts_cover_the_clip_and_repeat_for_the_same_stream():
    draws = [random_start(TEN_SECONDS, 17, random.Random(i)) for i in range(400)]
    assert min(draws) == 0 and max(draws) == TEN_SECONDS - 17
    assert random_start(TEN_SECONDS, 17, random.Random(3)) == random_start(TEN_SECONDS, 17, random.Random(3))


def shots(lengths: list[int], size: int = 48) -> np.ndarray:
    """Shots of a moving square on different backgrounds (hard cuts between them)."""
    frames = []
    for shot, length in enumerate(lengths):
        background = [(40, 40, 40), (200, 180, 60), (30, 90, 200)][shot % 3]
        for i in range(length):
            frame = np.full((size, size, 3), background, np.uint8)
            x = (2 * i) % (size - 8)
            frame[20:28, x:x + 8] = 255
            frames.append(frame)
    return np.stack(frames)


def test_keyframe_windows_start_at_the_cuts_and_fall_back_to_uniform():
    clip = shots([40, 50, 71])
    cuts = detect_cuts(clip)
    assert cuts == [40, 90]  # the moving square is not a cut
    windows = plan_windows(len(clip), 17, WindowOptions(S.KEYFRAME), cuts)
    assert starts(windows) == [0, 40, 90]
    single = shots([161])
    assert detect_cuts(single) == []
    assert plan_windows(161, 17, WindowOptions(S.KEYFRAME, count=4), detect_cuts(single)) == \
        plan_windows(161, 17, WindowOptions(S.UNIFORM, count=4))
    late = plan_windows(100, 17, WindowOptions(S.KEYFRAME), [90])  # too close to the end for a window
    assert starts(late) == [0]
