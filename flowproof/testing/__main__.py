"""``python -m flowproof.testing``: see `flowproof.testing.cli`."""

import sys

from flowproof.testing.cli import main

sys.exit(main())
