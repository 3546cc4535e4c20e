"""workers/pool."""
