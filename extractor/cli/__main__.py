"""``python -m extractor.cli``: the ``extractor`` command.

Guarded: vLLM's spawned engine core imports this module again (as ``__mp_main__``), and must not run
the command a second time when it does.
"""

import sys

from extractor.cli import main

if __name__ == "__main__":
    sys.exit(main())
