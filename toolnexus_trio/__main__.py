"""``python -m toolnexus_trio``: the commands live in :mod:`toolnexus_trio.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
