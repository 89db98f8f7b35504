"""The examples in tempo.rl's docstrings and in docs/rl.md run."""
from __future__ import annotations

import doctest
import pathlib
import re

import numpy as np
import pytest

import tempo.rl
import tempo.rl.env
import tempo.rl.tensorboard

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "rl.md"


@pytest.mark.parametrize("module", [tempo.rl, tempo.rl.env, tempo.rl.tensorboard], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert attempted > 0 and failed == 0


def test_the_example_in_docs_rl_md():
    code = re.search(r"```python\n(.*?)```", DOCS.read_text(), re.S).group(1)
    scope: dict = {}
    exec(compile(code, str(DOCS), "exec"), scope)
    rewards, returns = scope["rewards"], scope["returns"]
    assert rewards.shape == returns.shape == (4, 2, 100)
    np.testing.assert_allclose(returns[..., -1], rewards[..., -1])
    np.testing.assert_allclose(returns[..., :-1], rewards[..., :-1] + 0.99 * returns[..., 1:], rtol=1e-5)
