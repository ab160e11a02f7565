"""Pipelines: several stages in one app, regrouping through repartition topics, all in
one transaction per instance (issue 54).

- ``_graph``: the declarations (``Pipeline``, ``Stage``, ``Regroup``) and the checked
  graph (``plan``, ``Plan.describe``: what ``eosflow topology`` prints);
- ``_run``: ``staged``, the pipeline as the one processor the engine runs (records
  routed to their stages, ``Regroup`` turned into outputs to the repartition topic),
  and its repartition topics created or checked before the group is joined.

What ``eosflow``, ``EosApp`` and the CLI reach of the room is here.
"""

from ._graph import Pipeline, Plan, Regroup, Stage, plan, repartition_topic
from ._run import Staged, staged

__all__ = ["Pipeline", "Plan", "Regroup", "Stage", "Staged", "plan", "repartition_topic", "staged"]
