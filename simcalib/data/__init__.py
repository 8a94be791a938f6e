"""Benchmark graphs: registry, offline mirror, loading."""

from simcalib.data.external import register_external_dataset
from simcalib.data.loading import GraphData, data_root, graph_digest, load_dataset, mirror_dir
from simcalib.data.registry import DATASETS, DatasetSpec, dataset_names, get_spec, set_external_resolver

set_external_resolver(register_external_dataset)  # names not built in: other packages' graphs

__all__ = ["DATASETS", "DatasetSpec", "GraphData", "data_root", "dataset_names", "graph_digest", "get_spec", "load_dataset", "mirror_dir"]
