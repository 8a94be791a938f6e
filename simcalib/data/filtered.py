"""chameleon_filtered and squirrel_filtered (Platonov et al., ICLR 2023) as a torch_geometric dataset.

torch_geometric has no class for them; their files have the format of ``HeterophilousGraphDataset``
(``node_features`` [N, F], ``node_labels`` [N], ``edges`` [E, 2] with each undirected edge listed once,
``train_masks`` / ``val_masks`` / ``test_masks`` [10, N]), so this class is that dataset with another list of
names and the files of the authors' repository at a fixed commit. The processed graph is the same as
``HeterophilousGraphDataset``'s: ``edge_index`` holds both directions of every edge, the masks are [N, 10].
"""

from __future__ import annotations

from collections.abc import Callable

from torch_geometric.data import InMemoryDataset, download_url
from torch_geometric.datasets import HeterophilousGraphDataset

# yandex-research/heterophilous-graphs at the commit the mirror's files were taken from (byte-identical)
COMMIT = "a431395582e929d88271309716bea4fe24ce6318"


class FilteredWikipediaNetwork(HeterophilousGraphDataset):
    """The filtered Wikipedia networks ``"chameleon_filtered"`` and ``"squirrel_filtered"``: the chameleon and
    squirrel graphs without their duplicated nodes (which leak between training and test nodes).

    Files: ``<root>/<name>/raw/<name>.npz``; processed as :class:`HeterophilousGraphDataset` processes its own.
    """

    url = f"https://github.com/yandex-research/heterophilous-graphs/raw/{COMMIT}/data"
    names = ("chameleon_filtered", "squirrel_filtered")

    def __init__(self, root: str, name: str, transform: Callable | None = None,
                 pre_transform: Callable | None = None, force_reload: bool = False) -> None:
        self.name = name.lower().replace("-", "_")
        if self.name not in self.names:
            raise ValueError(f"unknown filtered Wikipedia network {name!r}; valid names are: {', '.join(self.names)}")
        InMemoryDataset.__init__(self, root, transform, pre_transform, force_reload=force_reload)
        self.load(self.processed_paths[0])

    def download(self) -> None:
        download_url(f"{self.url}/{self.name}.npz", self.raw_dir)
