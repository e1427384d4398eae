"""Make the shared fixture-app builder (``conformance/fixture_app.py``) importable.

It lives at the repository root beside ``conformance/host.py``, which imports it as
a top-level module; the tests import the very same file the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

_CONFORMANCE_DIR = Path(__file__).resolve().parents[3] / "conformance"
if str(_CONFORMANCE_DIR) not in sys.path:
    sys.path.insert(0, str(_CONFORMANCE_DIR))
