"""Engine settings only vLLM knows, checked before anything starts: the real ``docsumd`` command,
in a subprocess, refuses an ``[engine.extra]`` argument the installed vLLM does not have, and one a
typed key already sets, with exit 2 naming the key (no engine start: cheap). That the settings which
pass do reach the engine is shown by test_dashboard_metrics.py, whose daemon runs with them."""

from __future__ import annotations

import pytest

from tests.e2e.harness import Layout, run_cli


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            {"engine.extra.no_such_engine_argument": "1", "engine.extra.max_logprobs": "2"},
            "engine.extra.no_such_engine_argument: not an engine argument of vLLM",
        ),
        ({"engine.extra.max_num_seqs": "8"}, "engine.extra.max_num_seqs: set it with engine.max_num_seqs"),
    ],
    ids=["unknown-argument", "argument-of-a-typed-key"],
)
def test_a_bad_engine_argument_is_refused_with_exit_2_naming_it(
    layout: Layout, overrides: dict[str, str], named: str
) -> None:
    layout.write_config(**overrides)
    for command in (["check-config", str(layout.config)], ["run", "--config", str(layout.config)]):
        proc = run_cli(layout, *command)
        assert proc.returncode == 2, proc.stderr
        assert named in proc.stderr, proc.stderr
        assert "max_logprobs" not in proc.stderr  # an argument vLLM has passes
        assert "engine starting" not in proc.stderr
        assert proc.stdout == ""  # check-config prints no effective config for an invalid file
