"""Search spaces as data: parsing, grids, and errors that name the file, line and key."""

from pathlib import Path

import pytest
from shared_paths import PROJECT_ROOT

from simcalib.errors import ConfigError
from simcalib.tuning import calibrator_option_names, get_search_space, load_search_spaces


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spaces.yaml"
    path.write_text(text)
    return path


def test_ranges_choices_and_fixed_options_are_parsed(tmp_path):
    path = write(tmp_path, """
TS:
  default:
    params:
      lr: {low: 1e-3, high: 0.1, log: true}   # 1e-3 is text to YAML 1.1: read as a number anyway
      max_epochs: {low: 50, high: 250, type: int, step: 50}
      weight_decay: [0.0, 0.001]
    fixed: {patience: 20}
""")
    space = get_search_space("ts", path=path)
    lr, epochs, wd = space.params["lr"], space.params["max_epochs"], space.params["weight_decay"]
    assert (lr.kind, lr.low, lr.high, lr.log, lr.line) == ("float", 0.001, 0.1, True, 5)
    assert (epochs.kind, epochs.low, epochs.high, epochs.step) == ("int", 50, 250, 50)
    assert (wd.kind, wd.choices) == ("categorical", (0.0, 0.001))
    assert space.fixed == {"patience": 20}
    assert not space.is_grid
    with pytest.raises(ConfigError, match=r"cannot run as a grid: lr \(line 5\), max_epochs \(line 6\)"):
        space.grid()


@pytest.mark.parametrize("body, message", [
    ("      lrr: [0.1]", r"spaces.yaml:5: TS.default.params.lrr: not an option of TS; its options are: lr, weight_decay"),
    ("      lr: {low: 0.1, high: 0.01}", r"spaces.yaml:5: TS.default.params.lr: low \(0.1\) must be below high"),
    ("      lr: {low: 0, high: 1, log: true}", r":5: TS.default.params.lr: a log range needs low > 0"),
    ("      lr: {low: 0.1}", r":5: TS.default.params.lr: a range needs 'high'"),
    ("      lr: {low: 0.1, high: 1, kind: float}", r":5: TS.default.params.lr: unknown field\(s\) \['kind'\]"),
    ("      lr: {low: a, high: 1}", r":5: TS.default.params.lr.low: expected a finite number, got 'a'"),
    ("      lr: []", r":5: TS.default.params.lr: an empty list of choices"),
    ("      lr: [0.1]\n      lr: [0.2]", r":6: TS.default.params.lr: defined twice"),
    ("      max_epochs: {low: 1.5, high: 4, type: int}", r":5: TS.default.params.max_epochs: an int range needs integer"),
])
def test_errors_name_file_line_and_key(tmp_path, body, message):
    path = write(tmp_path, f"\nTS:\n  default:\n    params:\n{body}\n")
    with pytest.raises(ConfigError, match=message):
        load_search_spaces(path)


def test_unknown_calibrator_and_missing_space_are_named(tmp_path):
    with pytest.raises(ConfigError, match=r"spaces.yaml:2: NoSuch: unknown calibrator 'NoSuch'"):
        load_search_spaces(write(tmp_path, "\nNoSuch:\n  default:\n    params: {lr: [0.1]}\n"))
    path = write(tmp_path, "TS:\n  default:\n    params: {lr: [0.1]}\n")
    with pytest.raises(ConfigError, match=r"TS has no search space 'wide' .* available: default"):
        get_search_space("TS", "wide", path)
    with pytest.raises(ConfigError, match=r"no search space for VS .* \(calibrators with spaces: TS\)"):
        get_search_space("VS", path=path)
    with pytest.raises(ConfigError, match="spaces.yaml:4: TS.default.fixed.lr: is both searched"):
        load_search_spaces(write(tmp_path, "TS:\n  default:\n    params: {lr: [0.1]}\n    fixed: {lr: 0.1}\n"))


def test_option_names_follow_kwargs_to_the_base_class():
    assert calibrator_option_names("TS") == ["lr", "weight_decay", "max_epochs", "patience"]
    assert calibrator_option_names("VS")[0] == "train_bias"  # own option first, then the base class's
    assert "lr" in calibrator_option_names("VS")


def test_the_project_spaces_file_is_valid_and_holds_the_paper_grid():
    spaces = load_search_spaces(PROJECT_ROOT / "study" / "search_spaces.yaml")
    assert {"TS", "VS", "ETS"} <= set(spaces)
    if "SimCalib" in spaces:
        grid = spaces["SimCalib"]["paper_grid"]
        assert grid.grid() == {"w": [0.6, 0.8, 0.9], "t": [0.3, 0.5, 1.0]}
        assert grid.grid_size() == 9
        assert {"w", "t", "lr", "weight_decay", "heads", "feat_gnn", "feat_hidden"} <= set(spaces["SimCalib"]["default"].params)
