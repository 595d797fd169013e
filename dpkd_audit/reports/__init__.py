"""Reports built from saved result records: plots and tables."""
