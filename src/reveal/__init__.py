"""Reveal: find performance anomalies in ML hosts from hardware and OS telemetry alone."""

__version__ = "0.1.0"
