"""``python -m ccp_train.harness``: see :func:`ccp_train.harness.cli.main`."""

import sys

from .cli import main

sys.exit(main())
