"""Shared test configuration (helpers live in helpers.py)."""
