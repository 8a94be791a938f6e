"""Bootstrap intervals over runs: whole splits resampled, fixed seed, no interval for one run."""

from __future__ import annotations

import numpy as np
import pytest

from simcalib.report.bootstrap import mean_interval, median_interval, ratio_interval, split_icc


def test_two_splits_give_the_interval_between_their_means():
    # Resampling 2 equal splits: both from split 0 (p = 1/4), one of each (1/2), both from split 1 (1/4), so
    # the 2.5% and 97.5% percentiles of the resampled means are the two split means.
    values = [1.0, 2.0, 3.0, 7.0, 8.0, 9.0]
    interval = mean_interval(values, splits=[0, 0, 0, 1, 1, 1])
    assert (interval.low, interval.high) == pytest.approx((2.0, 8.0)) and interval.unit == "split"
    assert interval.units == 2 and interval.text() == "[2.00, 8.00]"


def test_runs_of_one_split_are_not_resampled_as_independent_draws():
    rng = np.random.default_rng(1)
    splits = np.repeat(np.arange(5), 15)
    values = 3.0 * rng.normal(size=5)[splits] + 0.3 * rng.normal(size=75)  # most variance between splits
    by_split, by_run = mean_interval(values, splits), mean_interval(values)
    assert by_run.unit == "run" and by_run.units == 75 and by_split.units == 5
    assert (by_split.high - by_split.low) > 3 * (by_run.high - by_run.low)
    assert by_split.low < values.mean() < by_split.high
    assert split_icc(values, splits) > 0.9


def test_run_level_interval_is_close_to_the_normal_one_for_many_independent_runs():
    values = np.random.default_rng(2).normal(10.0, 2.0, 400)
    interval = mean_interval(values)  # no splits: every run its own unit
    half = 1.96 * values.std(ddof=1) / np.sqrt(len(values))
    assert interval.low == pytest.approx(values.mean() - half, abs=0.1 * half)
    assert interval.high == pytest.approx(values.mean() + half, abs=0.1 * half)


def test_intervals_are_deterministic_and_do_not_depend_on_the_order_of_the_runs():
    rng = np.random.default_rng(3)
    values, splits = rng.normal(size=30), np.repeat(np.arange(5), 6)
    order = rng.permutation(30)
    first = mean_interval(values, splits)
    assert mean_interval(values, splits) == first
    shuffled = mean_interval(values[order], splits[order])  # the same splits drawn; sums in another order
    assert (shuffled.low, shuffled.high) == pytest.approx((first.low, first.high), abs=1e-12)


def test_one_run_has_no_interval_and_equal_runs_a_point():
    assert mean_interval([2.5]) is None and mean_interval([2.5, np.nan], [0, 1]) is None
    assert median_interval([4.0]) is None
    point = mean_interval([2.0, 2.0, 2.0], [0, 1, 2])
    assert (point.low, point.high) == (2.0, 2.0)
    # runs of a single split fall back to resampling the runs, and say so
    assert mean_interval([1.0, 2.0, 3.0], [0, 0, 0]).unit == "run"


def test_median_interval_resamples_splits_hand_computed():
    # two equal splits at 1 and 3: resampled medians 1, 2 (one of each) or 3
    interval = median_interval([1.0, 1.0, 1.0, 3.0, 3.0, 3.0], [0, 0, 0, 1, 1, 1])
    assert (interval.low, interval.high) == pytest.approx((1.0, 3.0))
    assert median_interval([1.0, 5.0, 2.0, 4.0, 3.0]).low >= 1.0  # runs: within the data


def test_ratio_interval_pools_numerators_and_denominators_of_the_drawn_splits():
    # split 0: 1 of 2 right, split 1: 6 of 8 right; pooled by split, the extremes are 0.5 and 0.75
    interval = ratio_interval([1, 0, 3, 3], [1, 1, 4, 4], [0, 0, 1, 1])
    assert (interval.low, interval.high) == pytest.approx((0.5, 0.75))
    assert ratio_interval([1, 1], [0, 2]) is None  # a run without nodes does not count


def test_split_icc_hand_computed():
    assert split_icc([1.0, 1.0, 3.0, 3.0], [0, 0, 1, 1]) == pytest.approx(1.0)  # all variance between splits
    assert split_icc([1.0, 3.0, 1.0, 3.0], [0, 0, 1, 1]) == 0.0  # equal split means: none
    assert np.isnan(split_icc([1.0, 2.0], [0, 0]))


def test_every_interval_is_written_by_one_rule_and_a_missing_one_stays_blank():
    from simcalib.report.bootstrap import Interval, fixed_digits, interval_text
    from simcalib.report.stats import diff_interval_text

    assert interval_text(-0.5, 1.25, fixed_digits(1, signed=True)) == "[-0.5, +1.2]"
    assert Interval(-0.5, 1.25, 3, "split").text(1, signed=True) == diff_interval_text(-0.5, 1.25, 1)
    assert interval_text(0.1234, 0.5, lambda v: f"{v:.3g}") == "[0.123, 0.5]"
    assert interval_text(float("nan"), 1.0, fixed_digits(2)) == "" == diff_interval_text(1.0, float("inf"))
