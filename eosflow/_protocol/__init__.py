"""Kafka's protocol as data, shared by the adapter and the test cluster: ``_wire`` builds
request and response classes from declarations written the way Kafka's JSON message
specs are, ``_specs`` declares the versions aiokafka lacks, ``_codes`` names Kafka's
error codes (one table)."""

from . import _codes as codes
from . import _specs as specs
from . import _wire as wire

__all__ = ["codes", "specs", "wire"]
