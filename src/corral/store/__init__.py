"""Where corral keeps its records: the ``Store`` protocol, its SQLite implementation (the default),
and — imported only when a user's ``database_url`` names one — ``corral.store.postgres.PostgresStore``.
Both run the shared SQL of ``corral.store.sqltx``."""

from corral.store.contract import UNSET, NewTask, Store, Tx
from corral.store.sqlite import SQLiteStore

__all__ = ["UNSET", "NewTask", "SQLiteStore", "Store", "Tx"]
