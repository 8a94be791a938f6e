"""The protocol settings a command builds from its options and a study file's ``backbone:`` overrides."""

import argparse
from pathlib import Path

import pytest

from simcalib.commands.common import protocol_settings


def _args(**given) -> argparse.Namespace:
    options = {"seed": 10, "data_root": None, "data_mirror": None, "splits_dir": None, "cache_dir": None,
               "device": "cpu", "max_epochs": None, "attention": None, **given}
    return argparse.Namespace(**options)


@pytest.mark.parametrize("study_backbone,command_line,expected", [
    (None, {}, ()),
    ({"attention": "csr"}, {}, (("attention", "csr"),)),  # a study's kernel reaches the runs
    ({"attention": "csr"}, {"attention": "pyg"}, ()),  # the command line wins, and the default adds nothing
    ({"attention": "pyg", "max_epochs": 50}, {"attention": "csr"}, (("attention", "csr"), ("max_epochs", 50))),
    ({"max_epochs": 50}, {"max_epochs": 7}, (("max_epochs", 7),)),
])
def test_a_study_files_backbone_overrides_reach_the_settings_under_the_command_line(study_backbone, command_line,
                                                                                      expected):
    settings = protocol_settings(_args(**command_line), study_backbone=study_backbone)
    assert settings.backbone_overrides == expected


def test_the_offline_studys_gat_rows_say_the_csr_kernel_and_its_gcn_rows_the_default():
    from simcalib.experiment.protocol import Run, backbone_options
    from simcalib.experiment.study import load_study

    study = load_study(Path(__file__).resolve().parents[2] / "study" / "offline.yaml")
    settings = protocol_settings(_args(), study_backbone=study.spec.backbone)
    assert backbone_options(Run("Cora", "GAT", 0, 0, 0), settings) == "attention=csr"
    assert backbone_options(Run("Cora", "GCN", 0, 0, 0), settings) == "default"
