"""Orchestration, tracking and search around the pure ``simcalib`` library (Prefect, MLflow, Optuna live here)."""
