"""Builds: fetch a source (git, patches, tarballs), key it, build it with cmake into an artifact.

Modules, in pipeline order: git, patches, archive, tarball, source -> cmake, cache, builder ->
artifact, bundle. Callers import the module they need (``from rocmbuild.build import source``).
"""
