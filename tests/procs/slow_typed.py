"""A typed running tally for the chaos tests: ``CHAOS_IN`` holds ``Reading`` records in
Avro through the schema registry (``EOSFLOW_SCHEMA_REGISTRY_URL``), each key's tally --
a ``Tally`` model -- is kept in a store, and every record writes the key's new tally to
``CHAOS_OUT``, in Avro too; slowed by ``CHAOS_DELAY_S`` a record so chaos lands
mid-stream. Exactly once: each key's tallies are counts 1..n, and each total the sum of
that key's first ``count`` amounts in offset order."""

import asyncio
import os

from pydantic import BaseModel

import eosflow


class Reading(BaseModel):
    seq: int
    amount: int


class Tally(BaseModel):
    count: int
    total: int
    last_seq: int


class SlowTyped(eosflow.Processor):
    stores = {"tallies": eosflow.Model(Tally)}

    def __init__(self) -> None:
        self.output = os.environ["CHAOS_OUT"]
        self.delay_s = float(os.environ.get("CHAOS_DELAY_S", "0.001"))
        # the topics' names are the test's: declared on the instance
        self.topics = {
            os.environ["CHAOS_IN"]: eosflow.Topic(key=str, value=eosflow.Avro(Reading)),
            self.output: eosflow.Topic(key=str, value=eosflow.Avro(Tally)),
        }

    async def process(self, record: eosflow.Record[str, Reading]) -> eosflow.Output | None:
        await asyncio.sleep(self.delay_s)
        reading = record.value
        if reading is None:
            return None
        store = self.state("tallies")
        key = (record.key or "").encode()
        last = store.get(key) or Tally(count=0, total=0, last_seq=-1)
        tally = Tally(count=last.count + 1, total=last.total + reading.amount, last_seq=reading.seq)
        store.put(key, tally)
        return eosflow.Output(self.output, tally, key=record.key)
