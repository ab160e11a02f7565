"""``eosflow run`` instances as child processes, for crash and chaos tests."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping


async def spawn_run(
    target: str,
    *,
    bootstrap_servers: str,
    group_id: str,
    input_topics: tuple[str, ...],
    transactional_id: str,
    env: Mapping[str, str] | None = None,
    capture: bool = False,
    log_level: str = "warning",
    log_format: str = "text",
) -> asyncio.subprocess.Process:
    """Start ``eosflow run target`` in a child process. ``EOSFLOW_*`` variables of this
    process are not inherited (the arguments and ``env`` say everything); ``capture``
    pipes stdout and stderr; ``log_format`` ``json`` makes its log lines JSON objects."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("EOSFLOW_")}
    child_env.update(env or {})
    args = [
        sys.executable,
        "-m",
        "eosflow",
        "--log-level",
        log_level,
        "--log-format",
        log_format,
        "run",
        target,
        "--bootstrap-servers",
        bootstrap_servers,
        "--group-id",
        group_id,
        "--transactional-id",
        transactional_id,
    ]
    for topic in input_topics:
        args += ["--input-topic", topic]
    pipe = asyncio.subprocess.PIPE if capture else None
    return await asyncio.create_subprocess_exec(*args, env=child_env, stdout=pipe, stderr=pipe)
