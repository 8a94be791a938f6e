"""The study report: the paper's tables, significance tests, figures and theory check from results files.

Pure library (pandas, scipy, matplotlib, seaborn): it reads ``results.csv`` files and saved predictions and
never retrains. :func:`build_report` writes ``report.md``, ``report.html`` and the tables, figures and CSVs
beside them; ``flows/report.py`` runs the same steps as Prefect tasks and logs the folder to MLflow.
"""

from simcalib.report.build import ReportOutputs, build_report
from simcalib.report.paper import load_paper_tables
from simcalib.report.results import load_study_results
from simcalib.report.theory import theorem_check

__all__ = ["ReportOutputs", "build_report", "load_paper_tables", "load_study_results", "theorem_check"]
