"""Shared fixtures of the Python tests: a seeded random generator whose seed is printed (pytest shows it
with a failure; FLASHATTN_SEED=<n> replays a run)."""

import os
import time

import numpy as np
import pytest


def pick_seed() -> int:
    env = os.environ.get("FLASHATTN_SEED")
    return int(env) if env else time.time_ns() % (2**32)


@pytest.fixture
def seed() -> int:
    value = pick_seed()
    print(f"FLASHATTN_SEED={value}")
    return value


@pytest.fixture
def rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)
