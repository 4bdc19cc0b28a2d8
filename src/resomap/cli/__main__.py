"""`python -m resomap.cli ...` = `resomap ...`."""

import sys

from resomap.cli import main

sys.exit(main())
