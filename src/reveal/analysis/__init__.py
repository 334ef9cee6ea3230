"""The analysis of one host: derive, select, features, detectors, attribution.

Numbers only (no wording, no collector, no store): :mod:`reveal.analysis.pipeline` fits
on a baseline and scores a run's windows. The one-call analysis of a run is
:func:`reveal.analyze` (:mod:`reveal.api`).
"""
