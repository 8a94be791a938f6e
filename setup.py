"""The packages of the wheel; everything else is in pyproject.toml.

The library is ``simcalib``. The orchestration layer is the repository's ``flows/`` folder, installed under the
name ``simcalib_flows`` so that the wheel puts no generically named top-level package into site-packages
(docs/decisions.md, "A lean install"); ``flows/`` imports its own modules relatively, so it runs under either name.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["simcalib", "simcalib.*"]), "simcalib_flows"],
    package_dir={"simcalib_flows": "flows"},
)
