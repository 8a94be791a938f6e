"""The results store: results.csv files, their columns, and the integrity checks on them."""
