"""`simcalib report --every`'s manifest: each folder key takes one folder or a list of them."""

from __future__ import annotations

import pytest

from simcalib.commands.report import read_manifest
from simcalib.errors import DataMissingError


def test_a_folder_key_takes_one_folder_or_a_list_and_names_a_missing_one(tmp_path):
    for name in ("a", "b", "rates"):
        (tmp_path / name).mkdir()
    manifest = tmp_path / "reports.yaml"
    manifest.write_text(f"- results: [{tmp_path / 'a'}, {tmp_path / 'b'}]\n  out: o1\n  title: t\n"
                        f"  data_efficiency: {tmp_path / 'rates'}\n"
                        f"- results: {tmp_path / 'a'}\n  out: o2\n  title: t\n")
    assert [entry["out"] for entry in read_manifest(manifest)] == ["o1", "o2"]
    manifest.write_text(f"- results: [{tmp_path / 'a'}, {tmp_path / 'missing'}]\n  out: o1\n  title: t\n")
    with pytest.raises(DataMissingError, match="results folder '.*missing' does not exist"):
        read_manifest(manifest)
    manifest.write_text(f"- results: {tmp_path / 'a'}\n  out: o1\n  title: t\n  data_efficiency: 0\n")
    with pytest.raises(DataMissingError, match="data_efficiency folder 0 does not exist"):
        read_manifest(manifest)
