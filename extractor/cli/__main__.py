"""``python -m extractor.cli``: the ``extractor`` command."""

import sys

from extractor.cli import main

sys.exit(main())
