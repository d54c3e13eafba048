"""Where corral keeps its records: the ``Store`` protocol and its SQLite implementation."""

from corral.store.protocol import UNSET, NewTask, Store, Tx
from corral.store.sqlite import SQLiteStore

__all__ = ["UNSET", "NewTask", "SQLiteStore", "Store", "Tx"]
