"""An example calibrator and graph for the SimCalib benchmark, registered through entry points."""
