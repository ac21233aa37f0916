"""The HTTP API (`launcher.py serve`): FastAPI routes over the engine and the store, micro-batched lanes per
model and device, and Label Studio's ML-backend protocol under /ls. docs/api.md describes it."""
