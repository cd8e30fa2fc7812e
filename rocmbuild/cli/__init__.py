"""The command line: parsing, dispatch, exit codes, the JSON envelope and all human text."""

from rocmbuild.cli.app import entry, main

__all__ = ["entry", "main"]
