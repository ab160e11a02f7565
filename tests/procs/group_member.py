"""A consumer-group member in its own process, for failover tests: prints ASSIGNED <n>
whenever its assignment changes, and consumes until killed."""

import asyncio
import sys

from aiokafka import AIOKafkaConsumer


async def main(bootstrap: str, topic: str, group: str, session_ms: int) -> None:
    c = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=max(session_ms // 10, 50),
    )
    await c.start()
    last = -1
    while True:
        await c.getmany(timeout_ms=100)
        n = len(c.assignment())
        if n != last:
            print(f"ASSIGNED {n}", flush=True)
            last = n


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
