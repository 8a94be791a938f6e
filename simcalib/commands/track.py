"""``simcalib track FOLDER``: load committed results into an MLflow tracking store, without recomputing.

FOLDER is a results folder such as ``reports/offline`` (its ``results/<Dataset>_<Backbone>/results.csv``) or
the benchmark folders' parent itself. Each benchmark becomes one MLflow run with a nested run per calibrator,
the layout ``simcalib study run`` logs; the folder's provenance.yaml becomes parameters, the rows'
calibrator definitions the nested runs' parameters, and the rendered report one run of its own. A second call
adds nothing (benchmarks whose content is already logged are skipped). Then ``simcalib ui`` shows them: the
last line printed is the link to the experiment's runs table in the MLflow UI that ``simcalib ui`` serves
(127.0.0.1, ``--mlflow-port``, default 5000).
"""

from __future__ import annotations

import argparse

COMMANDS = ("track",)  # the sub-commands register() adds


def register(sub) -> None:
    track = sub.add_parser("track", help="load committed results (e.g. reports/offline) into MLflow",
                           description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    track.add_argument("folder", help="results folder, e.g. reports/offline")
    track.add_argument("--tracking-uri", help="MLflow tracking URI (default: the study file's, sqlite:///mlflow.db)")
    track.add_argument("--study", default="study/quick.yaml",
                       help="study file whose tracking URI to use when --tracking-uri is not given (default: %(default)s)")
    track.add_argument("--experiment", help="experiment name (default: the folder as given, e.g. reports/offline)")
    track.add_argument("--mlflow-port", type=int, default=5000,
                       help="port of the MLflow UI the printed link points to (`simcalib ui`'s; default %(default)s)")
    track.set_defaults(func=run_track)


def run_track(args: argparse.Namespace) -> int:
    from simcalib.commands.orchestration import flows_module

    track_results = flows_module("track", "track").track_results
    runs_table_url = flows_module("tracking", "track").runs_table_url
    from simcalib.commands.ui import tracking_uri_of

    uri = tracking_uri_of(args)
    summary = track_results(args.folder, uri, args.experiment, notify=lambda line: print(line, flush=True))
    print(f"MLflow experiment {summary.experiment!r} (id {summary.experiment_id}) at {uri}: "
          f"{len(summary.logged)} logged now, {len(summary.unchanged)} already there unchanged; "
          "`simcalib ui` shows them")
    print(f"runs table: {runs_table_url(f'http://127.0.0.1:{args.mlflow_port}', summary.experiment_id)}")
    return 0
