"""Strongroom: data at rest encrypted, keys under control."""

__version__ = "0.1.0"
