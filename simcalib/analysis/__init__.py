"""The analysis behind the report's figures: feature signal, figure bins, homophily, plots."""
