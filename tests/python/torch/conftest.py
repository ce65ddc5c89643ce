"""Skips every torch backend test, saying why, where torch or braid.torch is missing."""
import pytest

from torch_helpers import SKIP_REASON


def pytest_collection_modifyitems(config, items):
    if SKIP_REASON:
        for item in items:
            if "python/torch" in str(item.fspath):
                item.add_marker(pytest.mark.skip(reason=SKIP_REASON))
