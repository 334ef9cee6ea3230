"""The metric catalog's data: one TOML file per telemetry source (see :mod:`reveal.catalog`)."""
