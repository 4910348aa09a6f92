"""Glue between the shards' plan and training frameworks (docs/architecture.md)."""
