"""Benchmarks of toolnexus-trio against its peers (``nox -s bench``); never run by pytest."""
