"""Tesseron host SDK on Trio."""
