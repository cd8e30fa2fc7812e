"""``python -m rocmbuild``."""

from rocmbuild.cli.app import entry

entry()
