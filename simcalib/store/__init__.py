"""The store: results.csv files, their columns and integrity checks, and the tuned options of calibrators on disk."""
