"""Changing a target safely: observing paths, the pure plan, file actions, the journaled protocol,
backups and history."""
