"""The store: the build cache under the cache home. Keys, artifacts and their manifests, bundles
(export and import), provenance, and housekeeping (what the cache holds and what may go).

Callers import the module they need (``from rocmbuild.store import cache``).
"""
