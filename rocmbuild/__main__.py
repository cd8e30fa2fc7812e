"""``python -m rocmbuild``."""

import sys

from rocmbuild.cli import main

sys.exit(main())
