"""live package."""
