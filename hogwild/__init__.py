"""Hogwild!: lock-free asynchronous training of one shared-memory model by many processes."""

from hogwild.errors import UsageError

__all__ = ["UsageError"]
