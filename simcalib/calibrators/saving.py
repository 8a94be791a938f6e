"""A fitted calibrator kept in a file, with its definition.

The file (``torch.save`` of plain values and tensors, read back with ``weights_only=True``: no code runs on
loading) holds what :func:`~simcalib.calibrators.build_calibrator` built the calibrator from (registered name,
number of classes, dataset, backbone, options), its resolved definition (:func:`calibrator_definition`: every
option, and its digest), its state dict, the attributes a fit sets outside it (``fitted_attributes``) and its
``fit_info``. Loading rebuilds the calibrator from that definition, checks that this simcalib resolves it to the
same digest, and restores the state: the same probabilities on the same graph's logits (graph calibrators read
the graph, so they are applied to a :class:`CalibrationGraph` of the same graph) and, for graph-free ones, on any
logits.
"""

from __future__ import annotations

import json
import os
import warnings

import torch

from simcalib.calibrators.base import Calibrator
from simcalib.errors import ConfigError, DefaultsTakenWarning

FORMAT = "simcalib.calibrator"
FORMAT_VERSION = 1


def save_calibrator(calibrator: Calibrator, path: str | os.PathLike) -> None:
    """Write ``calibrator`` (built by ``build_calibrator``, fitted) to ``path``."""
    from simcalib import __version__
    from simcalib.calibrators import calibrator_definition

    built = getattr(calibrator, "built_from", None)
    if built is None:
        raise ConfigError(f"{calibrator.name} was not built by simcalib.calibrators.build_calibrator, so its "
                          "definition is unknown: build it with build_calibrator(name, num_classes, ...) to save it")
    if not calibrator.fit_info and any(p.requires_grad for p in calibrator.parameters()):
        raise ConfigError(f"{calibrator.name} is not fitted; fit it before saving")
    definition = calibrator_definition(built["name"], built["dataset"], built["backbone"], **built["options"])
    torch.save({
        "format": FORMAT, "format_version": FORMAT_VERSION, "simcalib_version": __version__,
        "built_from": json.dumps(built, sort_keys=True),
        "definition": definition.text, "digest": definition.digest,
        "state": {key: value.detach().cpu() for key, value in calibrator.state_dict().items()},
        "attributes": json.dumps({name: getattr(calibrator, name) for name in calibrator.fitted_attributes}),
        "fit_info": json.dumps(calibrator.fit_info, default=float),
    }, path)


def load_calibrator(path: str | os.PathLike, device: str | torch.device = "cpu") -> Calibrator:
    """The fitted calibrator :meth:`Calibrator.save` wrote to ``path``, on ``device``, in evaluation mode."""
    from simcalib.calibrators import build_calibrator, calibrator_definition

    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConfigError(f"no calibrator file at {path}") from None
    except Exception as exc:  # torch raises several types for a file that is not its format
        raise ConfigError(f"{path} is not a saved calibrator ({type(exc).__name__}); write one with "
                          "calibrator.save(path)") from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        raise ConfigError(f"{path} is not a saved calibrator; write one with calibrator.save(path)")
    if saved["format_version"] != FORMAT_VERSION:
        raise ConfigError(f"{path} has calibrator format {saved['format_version']}; this simcalib reads "
                          f"{FORMAT_VERSION} (saved by simcalib {saved['simcalib_version']})")
    built = json.loads(saved["built_from"])
    definition = calibrator_definition(built["name"], built["dataset"], built["backbone"], **built["options"])
    if definition.digest != saved["digest"]:
        raise ConfigError(f"{path}: {built['name']} as saved (simcalib {saved['simcalib_version']}, definition "
                          f"{saved['digest']}) resolves to another definition here ({definition.digest}); load it "
                          "with the simcalib that saved it, or fit it again")
    with torch.random.fork_rng(devices=[]):  # building draws initial weights; loading leaves the stream alone
        with warnings.catch_warnings():  # stated when it was built
            warnings.simplefilter("ignore", DefaultsTakenWarning)
            calibrator = build_calibrator(built["name"], built["num_classes"], built["dataset"], built["backbone"],
                                          **built["options"])
        calibrator.restore_state(saved["state"], json.loads(saved["attributes"]))  # may build modules: drawn here
    calibrator.fit_info = json.loads(saved["fit_info"])
    return calibrator.to(device)


__all__ = ["FORMAT", "FORMAT_VERSION", "load_calibrator", "save_calibrator"]
