"""Benchmark graphs: registry, offline mirror, loading."""

from simcalib.data.loading import GraphData, data_root, graph_digest, load_dataset, mirror_dir
from simcalib.data.registry import DATASETS, DatasetSpec, dataset_names, get_spec

__all__ = ["DATASETS", "DatasetSpec", "GraphData", "data_root", "dataset_names", "graph_digest", "get_spec", "load_dataset", "mirror_dir"]
