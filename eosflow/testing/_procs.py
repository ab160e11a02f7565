"""``eosflow run`` instances as child processes, for crash and chaos tests."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from pathlib import Path


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
    log_file: Path | None = None,
) -> asyncio.subprocess.Process:
    """Start ``eosflow run target`` in a child process. ``EOSFLOW_*`` variables of this
    process are not inherited (the arguments and ``env`` say everything); ``capture``
    pipes stdout and stderr, ``log_file`` appends them to a file instead (read by a test
    that reports why an instance died); ``log_format`` ``json`` makes its log lines JSON
    objects."""
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
    if log_file is not None:
        with log_file.open("ab") as out:  # the child holds its own copy of the descriptor
            return await asyncio.create_subprocess_exec(
                *args, env=child_env, stdout=out, stderr=out
            )
    pipe = asyncio.subprocess.PIPE if capture else None
    return await asyncio.create_subprocess_exec(*args, env=child_env, stdout=pipe, stderr=pipe)
