"""A package the Spark tests ship to the executors as a zip (``SparkSettings.ship_code``):
on the test's clusters it can be imported only from that zip."""

from .calc import double

__all__ = ["double"]
