"""eosflow: exactly-once consume-transform-produce on Apache Kafka for asyncio."""

__all__: list[str] = []
