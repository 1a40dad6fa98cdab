"""Forecasts: how long a queued item will run, and when it will start and finish.

Two pure pieces, both over plain values so they can be pinned down by table
tests and hypothesis properties:

* :class:`Model` learns runtimes and token use from run records, per *kind*
  of run.  A kind is a rig, an issue type and a label; an item is forecast
  from the most specific level of ``rig+type+label → rig+type → rig → town``
  that holds at least ``min_samples`` runs, over the last ``window`` runs of
  that kind.  Medians and the 90th percentile are used (not means), so one
  run that hung for a day does not move the forecast of every other.  A
  ``timed-out`` run is a *censored* sample — it lasted at least as long as it
  ran — and enters through a Kaplan–Meier estimate rather than as if it had
  finished then; ``throttled``, ``stopped`` and ``vanished`` runs say nothing
  about how long the work takes and are left out.  With no such history the
  item's own ``estimated_minutes`` is used, then a default.

* :func:`simulate` (:mod:`sluice.core.replay`, named here too) replays the
  dispatch order under every rule admission applies, from the running
  polecats' remaining time, and says when each queued item starts and ends.

Every forecast says what it stands on (``basis``: level and sample count), so
an operator can tell a learned figure from a guess.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence

from sluice.core.recordclass import field, recordclass, replace
from sluice.core.replay import (  # noqa: F401 - the replay's names, where forecasts are made
    WHY_BUDGET,
    WHY_NO_CAPACITY,
    Charge,
    Limits,
    Queued,
    QueueForecast,
    Running,
    Slot,
    simulate,
    simulate_first,
    simulate_head,
)
from sluice.errors import ConfigError

#: Outcomes whose runtime is a finished sample, and the one that is a lower bound.
COUNTED = ("ok", "failed")
CENSORED = "timed-out"

LEVEL_LABEL = "rig+type+label"
LEVEL_TYPE = "rig+type"
LEVEL_RIG = "rig"
LEVEL_TOWN = "town"
LEVEL_ESTIMATE = "estimated_minutes"
LEVEL_DEFAULT = "default"

DEFAULT_MIN_SAMPLES = 5
DEFAULT_WINDOW = 200
DEFAULT_RUNTIME = 15 * 60.0
#: The least time a running polecat is assumed still to need: one past its median is not done yet.
REMAINING_FLOOR = 30.0


# --------------------------------------------------------------------------
# Quantiles


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``values`` (non-empty): always a value that was seen."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return float(ordered[rank - 1])


def censored_quantile(samples: Sequence[tuple[float, bool]], q: float) -> float:
    """The ``q`` quantile of ``(value, censored)`` samples by the Kaplan–Meier estimate.

    A censored value says only "at least this long"; it leaves the risk set
    without being an event.  When censoring leaves the distribution short of
    ``q`` (every long run timed out), the answer is the largest value seen:
    a lower bound, never a figure smaller than what was observed.
    """
    ordered = sorted(samples, key=lambda s: (s[0], s[1]))  # at a tie, events before censorings
    at_risk = len(ordered)
    survival = 1.0
    for value, censored in ordered:
        if not censored:
            survival *= (at_risk - 1) / at_risk
            if 1.0 - survival >= q - 1e-12:
                return float(value)
        at_risk -= 1
    return float(ordered[-1][0])


def censored_mean(samples: Sequence[tuple[float, bool]]) -> float:
    """The mean of ``(value, censored)`` samples (non-empty): the area under their Kaplan–Meier survival.

    Without censoring it is the plain mean.  The area is taken up to the
    longest value seen, so runs that all timed out count as lasting their
    timeout: a lower bound, like :func:`censored_quantile`'s.
    """
    ordered = sorted(samples, key=lambda s: (s[0], s[1]))
    at_risk = len(ordered)
    survival, area, last = 1.0, 0.0, 0.0
    for value, censored in ordered:
        area += survival * (value - last)
        last = value
        if not censored:
            survival *= (at_risk - 1) / at_risk
        at_risk -= 1
    return float(area)


# --------------------------------------------------------------------------
# Samples and the model


@recordclass(frozen=True)
class Sample:
    """One ended run as the model sees it."""

    rig: str
    issue_type: str | None  # None: not known (the run log does not keep it); counted by rig and town only
    labels: tuple[str, ...]
    runtime: float
    censored: bool = False
    tokens: int | None = None


def sample_of(record: Mapping) -> Sample | None:
    """The sample a run record gives, or None when its outcome or runtime says nothing about runtime.

    A record without an issue type gives a sample of unknown type.  A
    ``timed-out`` run is censored at its recorded runtime; the model raises
    it to the polecat timeout (:meth:`Model.of_kinds`).  Tokens are the
    reported usage, else the launch estimate.
    """
    outcome = record.get("outcome")
    runtime = record.get("runtime_seconds")
    if (outcome not in COUNTED and outcome != CENSORED) or not _number(runtime) or runtime < 0:
        return None
    tokens = record.get("tokens_used")
    if not _number(tokens):
        tokens = record.get("tokens_estimated")
    labels = record.get("labels") or ()
    return Sample(
        rig=str(record.get("rig") or ""),
        issue_type=record.get("issue_type") or None,
        labels=tuple(sorted({str(label) for label in labels if isinstance(label, str)})),
        runtime=float(runtime),
        censored=outcome == CENSORED,
        tokens=int(tokens) if _number(tokens) and tokens >= 0 else None,
    )


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@recordclass(frozen=True)
class Estimate:
    """What one item is expected to take, and what that expectation stands on."""

    runtime_p50: float
    runtime_p90: float
    tokens_p50: int | None
    tokens_p90: int | None
    level: str
    samples: int
    kind: str = ""
    #: The mean runtime (Kaplan–Meier, up to the longest run seen): what a slot is held for in the
    #: replay, since a queue drains by the sum of its runtimes, and a sum goes by the mean, not the median.
    runtime_mean: float | None = None

    @property
    def basis(self) -> dict:
        return {"level": self.level, "samples": self.samples}


@recordclass
class Model:
    """Recent samples per kind; ``estimate`` picks the most specific kind with enough of them.

    Feed it samples oldest first (:meth:`add`, or :func:`learn`); each kind
    keeps only its last ``window``, so an old regime ages out and memory stays
    bounded however long the history.
    """

    window: int = DEFAULT_WINDOW
    min_samples: int = DEFAULT_MIN_SAMPLES
    kinds: dict[tuple, deque] = field(default_factory=dict, repr=False)
    _cache: dict[tuple, Estimate] = field(default_factory=dict, repr=False)  # per kind, until the next add
    # The kind that speaks for each (rig, type, labels) asked about, until the next add: a queue of
    # 10,000 items comes in a few dozen shapes.
    _chosen: dict[tuple, tuple | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ConfigError(f"forecast.window must be >= 1 (got {self.window})")
        if self.min_samples < 1:
            raise ConfigError(f"forecast.min_samples must be >= 1 (got {self.min_samples})")

    @classmethod
    def of_kinds(cls, kinds: Mapping[tuple, Sequence[Sample]], window: int = DEFAULT_WINDOW,
                 min_samples: int = DEFAULT_MIN_SAMPLES, timeout: float | None = None) -> Model:
        """A model of windows kept elsewhere (oldest first); a censored run counts as lasting ``timeout``."""
        model = cls(window=window, min_samples=min_samples)
        for key, runs in kinds.items():
            if timeout:
                runs = [replace(s, runtime=max(s.runtime, float(timeout))) if s.censored else s for s in runs]
            model.kinds[key] = deque(runs, maxlen=window)
        return model

    def add(self, sample: Sample) -> None:
        for key in kind_keys(sample):
            runs = self.kinds.get(key)
            if runs is None:
                runs = self.kinds[key] = deque(maxlen=self.window)
            runs.append(sample)
            self._cache.pop(key, None)
        self._chosen.clear()

    def _kind(self, rig: str, issue_type: str | None, labels: Iterable[str]) -> tuple | None:
        """The most specific kind of this rig, type and labels that holds ``min_samples`` runs, or None.

        Of an item's labels, the one whose kind holds the most runs speaks
        (ties to the first label by name), so the figure is the best-founded
        one the item's own labels allow.
        """
        issue_type = issue_type or "task"
        by_label = [(LEVEL_LABEL, rig, issue_type, label) for label in sorted(set(labels))]
        by_label.sort(key=lambda key: -len(self.kinds.get(key, ())))
        for key in [*by_label, (LEVEL_TYPE, rig, issue_type), (LEVEL_RIG, rig), (LEVEL_TOWN,)]:
            runs = self.kinds.get(key)
            if runs is not None and len(runs) >= self.min_samples:
                return key
        return None

    def estimate(self, rig: str, issue_type: str | None = None, labels: Iterable[str] = (),
                 estimated_minutes: float | None = None, default_runtime: float = DEFAULT_RUNTIME,
                 tokens_estimated: int | None = None) -> Estimate:
        """The forecast for an item of this rig, type and labels (see :meth:`_kind` for which runs speak)."""
        shape = (rig, issue_type, tuple(labels))
        if shape in self._chosen:
            key = self._chosen[shape]
        else:
            key = self._chosen[shape] = self._kind(rig, issue_type, shape[2])
        if key is not None:
            found = self._cache.get(key)
            if found is None:
                found = self._cache[key] = _estimate(self.kinds[key], key)
            return found
        if estimated_minutes is not None and estimated_minutes >= 0:
            seconds, level = float(estimated_minutes) * 60.0, LEVEL_ESTIMATE
        else:
            seconds, level = default_runtime, LEVEL_DEFAULT
        return Estimate(seconds, seconds, tokens_estimated, tokens_estimated, level, 0, runtime_mean=seconds)


    def left(self, rig: str, elapsed: float, issue_type: str | None = None, labels: Iterable[str] = (),
             default_runtime: float = DEFAULT_RUNTIME, floor: float = REMAINING_FLOOR) -> float:
        """How much longer a running polecat of this kind, ``elapsed`` seconds in, is expected to take.

        From its kind's runs that lasted longer (:func:`residual_median`);
        with no such run (it outlived every one seen, or nothing is learned)
        its median less what it ran, floored at ``floor`` or the median,
        whichever is less, so a kind of one-second runs is not held for a
        floor meant for runs of minutes.
        """
        key = self._kind(rig, issue_type, labels)
        if key is not None:
            left = residual_median([(s.runtime, s.censored) for s in self.kinds[key]], elapsed)
            if left is not None:
                return left
            p50 = self.estimate(rig, issue_type, labels).runtime_p50
        else:
            p50 = default_runtime
        return remaining(p50, elapsed, floor=min(floor, p50))


def kind_keys(sample: Sample) -> list[tuple]:
    """The kinds a sample counts for: the town, its rig, its rig and type, and one per label."""
    keys = [(LEVEL_TOWN,), (LEVEL_RIG, sample.rig)]
    if sample.issue_type is not None:
        keys.append((LEVEL_TYPE, sample.rig, sample.issue_type))
        keys += [(LEVEL_LABEL, sample.rig, sample.issue_type, label) for label in sample.labels]
    return keys


def _estimate(runs: Sequence[Sample], key: tuple) -> Estimate:
    times = [(s.runtime, s.censored) for s in runs]
    tokens = [s.tokens for s in runs if s.tokens is not None]
    return Estimate(
        runtime_p50=censored_quantile(times, 0.5),
        runtime_p90=censored_quantile(times, 0.9),
        tokens_p50=int(quantile(tokens, 0.5)) if tokens else None,
        tokens_p90=int(quantile(tokens, 0.9)) if tokens else None,
        level=key[0],
        samples=len(runs),
        kind="/".join(key[1:]) or LEVEL_TOWN,
        runtime_mean=censored_mean(times),
    )


def learn(samples: Iterable[Sample | None], window: int = DEFAULT_WINDOW,
          min_samples: int = DEFAULT_MIN_SAMPLES) -> Model:
    """A model of ``samples`` (oldest first; Nones, from :func:`sample_of`, are skipped)."""
    model = Model(window=window, min_samples=min_samples)
    for sample in samples:
        if sample is not None:
            model.add(sample)
    return model


def remaining(runtime_p50: float, elapsed: float, floor: float = REMAINING_FLOOR) -> float:
    """How much longer a running polecat is expected to take: its median less what it has run, floored."""
    return max(floor, runtime_p50 - max(0.0, elapsed))


def residual_median(samples: Sequence[tuple[float, bool]], elapsed: float) -> float | None:
    """The median of what is left of a run that has lasted ``elapsed``, given ``(value, censored)`` samples.

    The Kaplan–Meier survival conditioned on having survived ``elapsed``:
    the first finished value ``v > elapsed`` by which half of the runs that
    outlived ``elapsed`` had ended, less ``elapsed``.  At ``elapsed`` below
    every value this is the plain (censored) median.  A run that outlived its median is
    not "nearly done": what is left is judged by the runs that lasted as
    long.  None when no finished run outlived ``elapsed`` (nothing to judge by).
    """
    elapsed = max(0.0, elapsed)
    ordered = sorted(samples, key=lambda s: (s[0], s[1]))
    at_risk = len(ordered)
    survival = 1.0
    target = None
    for value, censored in ordered:
        if target is None and value > elapsed:
            target = survival / 2.0  # the survival at ``elapsed``: half of it is the conditional median
        if not censored:
            survival *= (at_risk - 1) / at_risk
            if target is not None and survival <= target + 1e-12:
                return float(value) - elapsed
        at_risk -= 1
    return None
