"""The builder: cmake's argv, the build run step by step with its retries and logs, the build tree's
owner, reproducibility, and what the build machine must have (requirements, hints, shims).

Callers import the module they need (``from rocmbuild.builder import builder``).
"""
