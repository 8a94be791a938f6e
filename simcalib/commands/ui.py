"""``simcalib ui``: the MLflow UI, the Optuna dashboard and the Prefect server on 127.0.0.1, until Ctrl-C.

The MLflow UI reads the study's tracking store (the file's ``tracking_uri``, default ``sqlite:///mlflow.db``,
which ``simcalib tune`` also writes), the Optuna dashboard the search storage ($SIMCALIB_OPTUNA_STORAGE or
``sqlite:///optuna.db``; where it holds no search, one line says how to create one). Each service logs to
``.cache/ui/<name>.log``. Ctrl-C (or SIGTERM) stops all three and waits for them to exit.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from simcalib.commands.common import sigterm_as_interrupt

SERVICES = ("mlflow", "optuna", "prefect")


COMMANDS = ("ui",)  # the sub-commands register() adds


def register(sub) -> None:
    ui = sub.add_parser("ui", help="start the MLflow UI, Optuna dashboard and Prefect server on 127.0.0.1",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ui.add_argument("--study", default="study/quick.yaml", help="study file whose tracking URI to show (default: %(default)s)")
    ui.add_argument("--tracking-uri", help="MLflow tracking URI (overrides the study's)")
    ui.add_argument("--optuna-storage", help="Optuna storage URL (default: $SIMCALIB_OPTUNA_STORAGE or sqlite:///optuna.db)")
    ui.add_argument("--mlflow-port", type=int, default=5000)
    ui.add_argument("--optuna-port", type=int, default=8080)
    ui.add_argument("--prefect-port", type=int, default=4200)
    ui.add_argument("--only", type=lambda v: [s.strip() for s in v.split(",") if s.strip()], default=list(SERVICES),
                    help=f"comma list among {', '.join(SERVICES)} (default: all)")
    ui.add_argument("--log-dir", default=".cache/ui", help="service logs (default: %(default)s)")
    ui.set_defaults(func=run_ui)


def tracking_uri_of(args: argparse.Namespace) -> str:
    if args.tracking_uri:
        return args.tracking_uri
    from simcalib.experiment.study import DEFAULT_TRACKING_URI, load_study

    if args.study and Path(args.study).is_file():
        return load_study(args.study).tracking_uri
    return DEFAULT_TRACKING_URI


def run_ui(args: argparse.Namespace) -> int:
    from simcalib.commands.orchestration import flows_module

    services = flows_module("services", "ui")
    mlflow_ui, optuna_dashboard = services.mlflow_ui, services.optuna_dashboard
    optuna_storage_note = services.optuna_storage_note
    port_in_use, prefect_server = services.port_in_use, services.prefect_server
    from simcalib.errors import ConfigError
    from simcalib.tuning import optuna_storage

    unknown = [s for s in args.only if s not in SERVICES]
    if unknown:
        raise ConfigError(f"--only: unknown service(s) {', '.join(unknown)}; choose among {', '.join(SERVICES)}")
    log_dir = Path(args.log_dir)
    storage = optuna_storage(args.optuna_storage)
    wanted = {
        "mlflow": lambda: mlflow_ui(tracking_uri_of(args), args.mlflow_port, log_dir),
        "optuna": lambda: optuna_dashboard(storage, args.optuna_port, log_dir),
        "prefect": lambda: prefect_server(args.prefect_port, log_dir),
    }
    ports = {"mlflow": args.mlflow_port, "optuna": args.optuna_port, "prefect": args.prefect_port}
    busy = [f"{name} port {ports[name]}" for name in args.only if port_in_use(ports[name])]
    if busy:
        raise ConfigError(f"already in use on 127.0.0.1: {', '.join(busy)}; stop what holds them or choose other "
                          "ports (--mlflow-port, --optuna-port, --prefect-port)")
    services = [wanted[name]() for name in SERVICES if name in args.only]

    # Ctrl-C must stop us even when we were started from a background job (`cmd &` in a script), which
    # inherits SIGINT as ignored; the children, started after this, then get the default disposition too.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    status = 0
    with sigterm_as_interrupt():  # SIGTERM behaves like Ctrl-C
        try:
            for service in services:
                service.start()
            for service in services:
                service.wait_healthy()
                print(f"{service.name:<17} {service.url}   (log: {service.log_path})", flush=True)
            note = optuna_storage_note(storage) if "optuna" in args.only else None
            if note:  # an empty storage: the dashboard would open on nothing
                print(note, flush=True)
            print("ready; press Ctrl-C to stop", flush=True)
            while all(service.running() for service in services):
                time.sleep(1.0)
            stopped = [s for s in services if not s.running()]
            print(f"{', '.join(s.name for s in stopped)} stopped by itself; see {stopped[0].log_path}", file=sys.stderr)
            status = 1
        except KeyboardInterrupt:
            print("\nstopping ...", flush=True)
        except (RuntimeError, TimeoutError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the shutdown short
            for service in reversed(services):
                service.stop()
            signal.signal(signal.SIGINT, signal.default_int_handler)
    print("stopped", flush=True)
    return status
