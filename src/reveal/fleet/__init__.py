"""Fleet analysis: every host compared with its peers at the same moment (see docs/fleet.md)."""
