"""analyze package."""
