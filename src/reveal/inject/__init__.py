"""inject package."""
