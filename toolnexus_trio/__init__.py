"""toolnexus-trio: Trio-native tool calling and agent loop, plus a Tesseron host SDK."""

from ._version import __version__ as __version__
