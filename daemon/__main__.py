"""``python -m daemon`` and the ``docsumd`` command.

vLLM starts its engine processes with ``spawn``, which re-imports the main module: the guard below
keeps those imports from running the command line again.
"""

import sys

from daemon.cli import main

if __name__ == "__main__":
    sys.exit(main())
