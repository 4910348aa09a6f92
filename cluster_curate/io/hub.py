"""The Hugging Face hub, when a dataset or model is named by a hub id: is it reachable, and offline mode.

Without a network, datasets and transformers retry for 25-50 s before failing; a one-second probe first lets
a command fail (or use the local cache) at once.
"""

from __future__ import annotations

from contextlib import contextmanager

HUB_PROBE_SECONDS = 1.0  # how long to wait for the hub before treating it as offline


def hub_endpoint() -> str:
    from huggingface_hub import constants
    return constants.ENDPOINT


def hub_reachable(endpoint: str | None = None, timeout: float = HUB_PROBE_SECONDS) -> bool:
    """Whether the hub answers at all (any HTTP status) within `timeout`; honours the proxy variables."""
    import urllib.error
    import urllib.request
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint or hub_endpoint(), method="HEAD"),
                               timeout=timeout).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):  # URLError, refused, timed out, a malformed HF_ENDPOINT
        return False
    return True


@contextmanager
def hub_offline(active: bool = True):
    """datasets, transformers and huggingface_hub in offline mode for the block (the local cache only, no
    retries) when `active`."""
    if not active:
        yield
        return
    import datasets
    from huggingface_hub import constants
    before = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = before
