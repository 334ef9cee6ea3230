"""Storage: the run directory format, its readers and writers, and other sources."""
