"""Pinned numbers of every registered calibrator on a tiny fixed graph: the guard of the declared versions.

A results row is reused as long as its calibrator's definition digest is unchanged
(:func:`simcalib.experiment.protocol.row_definition`), and that digest moves with the class's ``numbers_version``,
not with its source text: an edit that moves a calibrator's numbers must bump that version, or the rows computed
before it would be taken for rows of the edited code. This test fits every registered calibrator (its preset
options, the seed rule of the protocol) on :func:`graph_fixtures.tiny_graph` and compares the probabilities of a
few nodes and two summaries over all nodes with ``pinned_numbers.json``. When they move it fails naming the class
and the version to bump; after the bump, write the file again:

    python tests/calibrators/test_pinned_numbers.py --write

Tolerance: 1e-4 relative (and 1e-6 absolute, for probabilities near 0). The fits run in float32 on one torch
thread and are bit-identical from run to run on one machine; on another CPU model the vector kernels sum in
another order and an iterative fit drifts in its last bits (GATS: 2.5e-8 on a probability of 0.009, 3e-6
relative, between two CPU models). The tolerance ignores that drift and catches a change of a model, which
moves these numbers by orders of magnitude more.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from graph_fixtures import tiny_graph  # noqa: E402

PINNED = Path(__file__).with_name("pinned_numbers.json")
NODES = range(0, 48, 6)  # the nodes whose probabilities are pinned (labelled and unlabelled ones)
RTOL, ATOL = 1e-4, 1e-6
SEED = 20260101


def pinned_calibrators() -> list[str]:
    from simcalib.calibrators import calibrator_names

    return calibrator_names()  # the tuned ones are their base class with other options


def numbers(name: str) -> dict:
    """``name`` fitted on the tiny graph under its protocol seed: its class, numbers version and numbers."""
    from simcalib.calibrators import CALIBRATORS, build_calibrator, calibrator_seed_name
    from simcalib.seeding import derive_seed, seed_everything

    graph = tiny_graph()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seed_everything(derive_seed(SEED, calibrator_seed_name(name)))
        model = build_calibrator(name, graph.num_classes, "Cora", "GCN")
        model.fit(graph)
        probs = model.predict_proba(graph).detach().double()
    finally:
        torch.set_num_threads(threads)
    y = torch.arange(graph.num_nodes) % graph.num_classes
    nll = -torch.log(probs[torch.arange(graph.num_nodes), y].clamp_min(1e-12)).mean()
    cls = CALIBRATORS[name].cls
    return {"class": cls.__name__, "numbers_version": int(cls.numbers_version),
            "probabilities": [[float(p) for p in probs[node]] for node in NODES],
            "mean_confidence": float(probs.max(1).values.mean()), "nll": float(nll)}


def _flat(entry: dict) -> list[float]:
    return [p for row in entry["probabilities"] for p in row] + [entry["mean_confidence"], entry["nll"]]


def _read() -> dict:
    return json.loads(PINNED.read_text())


@pytest.mark.parametrize("name", pinned_calibrators())
def test_a_calibrators_numbers_are_its_pinned_ones_or_its_version_was_bumped(name):
    pinned = _read()
    assert name in pinned, (f"{name} has no pinned numbers: run `python tests/calibrators/test_pinned_numbers.py "
                            "--write` and commit tests/calibrators/pinned_numbers.json")
    got, want = numbers(name), pinned[name]
    if got["numbers_version"] != want["numbers_version"]:
        pytest.fail(f"{got['class']}.numbers_version is {got['numbers_version']}, pinned {want['numbers_version']}: "
                    "write the pinned numbers again (python tests/calibrators/test_pinned_numbers.py --write)")
    moved = [i for i, (a, b) in enumerate(zip(_flat(got), _flat(want)))
             if not math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL) and not (math.isnan(a) and math.isnan(b))]
    if moved:
        worst = max(abs(_flat(got)[i] - _flat(want)[i]) for i in moved)
        pytest.fail(f"the numbers of {name} moved ({len(moved)} of {len(_flat(got))} pinned values, at most by "
                    f"{worst:.3g}): if the change is meant, bump {got['class']}.numbers_version to "
                    f"{got['numbers_version'] + 1} (its rows are computed again) and write the pinned numbers "
                    "again (python tests/calibrators/test_pinned_numbers.py --write); if not, the edit changed "
                    "numbers it must not")


def test_every_pinned_calibrator_is_registered():
    assert sorted(_read()) == sorted(pinned_calibrators())


def write() -> None:
    data = {name: numbers(name) for name in pinned_calibrators()}
    PINNED.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"{PINNED}: pinned numbers of {len(data)} calibrators")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/calibrators/test_pinned_numbers.py --write")
    write()
