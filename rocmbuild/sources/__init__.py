"""Sources: what a build starts from. git (hermetic), archives (tar, zip, wheel, ``.deb``) and their
safe extraction, downloads, patches, and the fixes a recipe names, checked in the source.

Callers import the module they need (``from rocmbuild.sources import source``).
"""
