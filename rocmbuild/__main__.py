"""``python -m rocmbuild``."""

import sys

from rocmbuild.cli.app import main

sys.exit(main())
