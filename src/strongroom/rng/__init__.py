"""Entropy: sources, health tests and statistics (issue 5). Keys always come from getrandom(2)."""
