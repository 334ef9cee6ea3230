"""Catalog entries, one module per telemetry source; each exposes ``ENTRIES``."""
