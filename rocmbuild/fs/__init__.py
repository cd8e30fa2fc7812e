"""The only code that touches a filesystem: :class:`~rocmbuild.fs.root.Root` (a directory fd, every path
resolved beneath it), the beneath walk, copies, durable writes and locks.

Callers import the module they need (``from rocmbuild.fs.root import Root``).
"""
