"""rocmbuild: build GPU libraries from source and swap them into an environment transactionally."""

__version__ = "0.1.0"
