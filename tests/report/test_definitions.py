import json

import pandas as pd

from simcalib.calibrators import calibrator_definition
from simcalib.report.definitions import (
    NOT_RECORDED_DIGEST,
    definition_blocks,
    definitions_frame,
    write_definitions,
)
from simcalib.report.render import Table, to_markdown


def _rows(calibrator, dataset, backbone, runs, **options):
    definition = calibrator_definition(calibrator, dataset, backbone, **options)
    return [{"calibrator": calibrator, "dataset": dataset, "backbone": backbone, "split": s,
             "calibrator_options": definition.text, "calibrator_digest": definition.digest} for s in range(runs)]


def test_the_report_lists_each_calibrators_definitions_and_the_options_that_vary(tmp_path):
    rows = pd.DataFrame(_rows("GATS", "Cora", "GCN", 3) + _rows("GATS", "Cora", "GAT", 2) + _rows("TS", "Cora", "GCN", 3)
                        + _rows("TS", "Cora", "GAT", 2)
                        + [{"calibrator": "TS", "dataset": "Citeseer", "backbone": "GCN", "split": 0}])
    frame = definitions_frame(rows)
    ts_old = frame[(frame["calibrator"] == "TS") & (frame["dataset"] == "Citeseer")]
    assert list(ts_old["calibrator_digest"]) == [NOT_RECORDED_DIGEST] and list(ts_old["rows"]) == [1]
    gats = frame[frame["calibrator"] == "GATS"].set_index("backbone")
    assert json.loads(gats.loc["GAT", "calibrator_options"])["weight_decay"] == 0.01
    assert gats.loc["GCN", "rows"] == 3

    heading, _, table = definition_blocks(frame)
    assert isinstance(table, Table) and heading.text == "Calibrator definitions"
    body = {line[0]: line[1:] for line in table.body}
    # GATS: two benchmarks, two definitions (their weight decays differ); TS: one definition on both, one old row
    assert body["GATS"] == ("2", "2", "weight_decay", "5", "0")
    assert body["TS"] == ("2", "1", "none", "5", "1")
    assert "calibrator_definitions.csv" in to_markdown(definition_blocks(frame))
    path = write_definitions(frame, tmp_path)
    assert pd.read_csv(path).shape == frame.shape


def test_rows_without_the_columns_are_reported_as_not_recorded():
    rows = pd.DataFrame([{"calibrator": "TS", "dataset": "Cora", "backbone": "GCN", "split": s} for s in range(4)])
    (_, _, table) = definition_blocks(definitions_frame(rows))
    assert table.body == (("TS", "0", "0", "", "0", "4"),)
    assert definition_blocks(definitions_frame(rows.iloc[:0])) == []
