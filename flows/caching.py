"""Cache keys of the study's tasks: what makes a finished task reusable after an interruption.

A task's key hashes everything its numbers depend on and nothing else:

* the run's identity (dataset, backbone, split, init, fold) and the protocol settings that change numbers
  (study seed, fold and test rates, device, backbone overrides, the fixed split file's content);
* for a calibrator, its canonical name and resolved options (tuned options included, so a new search
  result is recomputed);
* a fingerprint of the library source that computes numbers (data, splits, backbones, calibrators, metrics,
  protocol), and the torch and torch_geometric versions: changed code never reuses stale results.

Locations (data root, mirror, backbone cache, output folder) are not part of a key: moving a study keeps its
cache. Keys start with readable parts so the persisted result files can be told apart on disk.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import torch
import torch_geometric
import yaml

import simcalib
from simcalib.errors import ConfigError
from simcalib.experiment.protocol import ProtocolSettings, Run
from simcalib.experiment.splits import find_split_file, protocol_name

# Library modules (and packages) that only read, report or resolve configuration: editing them does not change
# any number.
_NOT_NUMERIC = ("simcalib.commands", "simcalib.report", "simcalib.tuning", "simcalib.cli", "simcalib.analysis.plots",
                "simcalib.analysis.palette",
                "simcalib.experiment.study", "simcalib.experiment.plan", "simcalib.errors", "simcalib.store.integrity")
KEY_VERSION = 1  # bump when the meaning of a task's result changes


EQUIVALENCES = Path(__file__).with_name("fingerprint_equivalences.yaml")


@functools.lru_cache(maxsize=1)
def library_fingerprint() -> str:
    """The code part of every task key: :func:`source_fingerprint`, or the earlier fingerprint that
    ``flows/fingerprint_equivalences.yaml`` records this exact source as computing the same numbers as (tasks
    recomputed with it equal to their records), so finished tasks stay valid across an edit that cannot move a
    number. Any further edit gives a fingerprint the file does not name, keyed anew."""
    return canonical_fingerprint(source_fingerprint(), read_equivalences())


def canonical_fingerprint(fingerprint: str, equivalences: dict[str, str]) -> str:
    """``fingerprint`` followed through ``equivalences`` (source -> the earlier one with the same numbers)."""
    seen = [fingerprint]
    while fingerprint in equivalences:
        fingerprint = equivalences[fingerprint]
        if fingerprint in seen:
            raise ConfigError(f"{EQUIVALENCES.name}: the fingerprints {' -> '.join(seen + [fingerprint])} form a "
                              "cycle; each entry must name an earlier fingerprint")
        seen.append(fingerprint)
    return fingerprint


def read_equivalences(path: Path | None = None) -> dict[str, str]:
    """``{fingerprint: same_numbers_as}`` from the equivalences file (none when it is absent)."""
    path = EQUIVALENCES if path is None else path
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
        entries = data.get("equivalences") or []
        pairs = {str(e["fingerprint"]): str(e["same_numbers_as"]) for e in entries}
    except (yaml.YAMLError, AttributeError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a list of equivalences ({type(exc).__name__}: {exc}); each entry needs "
                          "'fingerprint' and 'same_numbers_as' under the key 'equivalences'") from None
    if len(pairs) != len(entries):
        raise ConfigError(f"{path}: a fingerprint is listed twice")
    return pairs


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """sha256 over the source of the numeric parts of ``simcalib`` (file names and contents, sorted)."""
    root = Path(simcalib.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        module = ".".join(("simcalib", *relative.with_suffix("").parts))
        if any(module == part or module.startswith(part + ".") for part in _NOT_NUMERIC):
            continue
        digest.update(str(relative).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def _split_digest(splits_dir: str | None, dataset: str, split: int, protocol: str) -> str:
    path = find_split_file(Path(splits_dir) if splits_dir else None, dataset, split, protocol)
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path else "generated"


def _resolved_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def run_identity(run: Run, settings: ProtocolSettings) -> dict[str, Any]:
    """Everything that determines a run's backbone, as JSON-able data."""
    splits_dir = settings.resolved_splits_dir()
    protocol = protocol_name(settings.fold_rate, settings.n_folds, settings.test_rate)
    return {
        "run": [run.dataset, run.backbone, run.split, run.init, run.fold],
        "seed": settings.study_seed,
        "protocol": [settings.fold_rate, settings.n_folds, settings.test_rate],
        "split_file": _split_digest(str(splits_dir) if splits_dir else None, run.dataset, run.split, protocol),
        "device": _resolved_device(settings.device),
        "backbone": [[k, v] for k, v in settings.backbone_overrides],
        "code": library_fingerprint(),
        "torch": torch.__version__,
        "pyg": torch_geometric.__version__,
        **({"trainer": "batched"} if settings.batch_runs else {}),  # the per-run keys stay as they were
    }


def _digest(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:20]


def pretrain_key(run: Run, settings: ProtocolSettings) -> str:
    identity = {"task": "pretrain", "v": KEY_VERSION, **run_identity(run, settings)}
    return f"pretrain-{run.tag()}-{_digest(identity)}"


def calibrate_key(run: Run, settings: ProtocolSettings, calibrator: str, options: dict | None) -> str:
    identity = {"task": "calibrate", "v": KEY_VERSION, "calibrator": calibrator, "options": options or {},
                **run_identity(run, settings)}
    return f"calibrate-{run.tag()}-{calibrator}-{_digest(identity)}"


def calibrate_across_runs_key(runs: list[Run], settings: ProtocolSettings, calibrator: str, options: dict | None) -> str:
    """Key of one calibrator fitted on several runs together: every run's own key, and the fit path, whose
    rounding differs from the per-run fit's (so the two never share a cached result)."""
    identity = {"task": "calibrate-across-runs", "v": KEY_VERSION,
                "runs": [calibrate_key(run, settings, calibrator, options) for run in runs]}
    first = runs[0]
    return f"calibrate-runs-{first.dataset}-{first.backbone}-s{first.split}-{len(runs)}runs-{calibrator}-{_digest(identity)}"


def benchmark_key(runs: list[Run], settings: ProtocolSettings, calibrator_options: dict[str, dict | None],
                  together: set[str]) -> str:
    """Key of a whole benchmark's rows: every run x calibrator task key, and which calibrators are fitted on a
    split's runs together (their rows differ from per-run fits by rounding). Equal keys: equal rows."""
    keys = sorted(calibrate_key(run, settings, name, options) + ("+runs" if name in together else "")
                  for run in runs for name, options in calibrator_options.items())
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:20]


def pretrain_cache_key_fn(context, parameters: dict) -> str:
    """Prefect ``cache_key_fn`` of the pretrain task."""
    return pretrain_key(parameters["run"], parameters["settings"])


def calibrate_cache_key_fn(context, parameters: dict) -> str:
    """Prefect ``cache_key_fn`` of the calibrate task (the predictions folder is an output, not an input)."""
    return calibrate_key(parameters["run"], parameters["settings"], parameters["calibrator"], parameters["options"])


def calibrate_across_runs_cache_key_fn(context, parameters: dict) -> str:
    """Prefect ``cache_key_fn`` of the calibrate-across-runs task."""
    return calibrate_across_runs_key(parameters["runs"], parameters["settings"], parameters["calibrator"],
                                     parameters["options"])


__all__ = [
    "benchmark_key", "calibrate_across_runs_cache_key_fn", "calibrate_across_runs_key", "calibrate_cache_key_fn",
    "calibrate_key", "canonical_fingerprint", "library_fingerprint", "pretrain_cache_key_fn", "pretrain_key",
    "read_equivalences", "run_identity", "source_fingerprint",
]
