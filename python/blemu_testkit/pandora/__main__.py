"""`python -m blemu_testkit.pandora`: the same as `blemu-pandora`."""

import sys

from .server import main

sys.exit(main())
