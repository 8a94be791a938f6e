"""The protocol layer: a study file resolved into a plan, the runs of the GATS protocol, their splits, and the execution of a benchmark."""
