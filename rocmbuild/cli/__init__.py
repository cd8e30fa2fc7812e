"""The command line: parsing, dispatch, exit codes, the JSON envelope and all human text."""

from rocmbuild.cli.app import main

__all__ = ["main"]
