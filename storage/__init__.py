"""The run history, batch-job queue, gold datasets and fine-tuning runs (SQLite via SQLAlchemy), and their migrations."""
from storage.repository import Store, open_store, record_cli_run

__all__ = ["Store", "open_store", "record_cli_run"]
