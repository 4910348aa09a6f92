"""Runs stages over artifacts: read inputs, check lineage, call a pure stage function, write the output.

Stages below (features/, clustering.py, selection.py, sharding.py) know nothing of files, CLI or ranks;
this module and cli.py do the I/O. Each stage has its own section (edit only your section).
"""

from __future__ import annotations

# ============================================================================================ inspect

# ============================================================================================ embed

# ============================================================================================ cluster

# ============================================================================================ select

# ============================================================================================ shard

# ============================================================================================ run
