"""The run history and batch-job queue (SQLite via SQLAlchemy), its migrations and the exporters."""
from storage.repository import Store, open_store, record_cli_run

__all__ = ["Store", "open_store", "record_cli_run"]
