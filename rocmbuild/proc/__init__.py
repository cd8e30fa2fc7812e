"""Processes: the runner (the only place rocmbuild starts one), the supervisor every child runs under
(``reaper.py``, stdlib only) and the one stop path for SIGINT, SIGTERM and SIGHUP.

Callers import the module they need (``from rocmbuild.proc import runner``).
"""
