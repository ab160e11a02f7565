"""The console room: a page in the browser showing what one app is doing, served by the
app itself on its operations port (issue 56).

- ``_recorder``: ``Recorder``, the observer that keeps the last minutes (a point a
  second, the events, the partitions held and their lag);
- ``_page``: ``Console``, the recorder and the page's routes (the static files in
  ``static/`` and ``/console/snapshot.json``);
- ``_group``: ``GroupPage``, a group's page (``eosflow console``): what ``eosflow
  status`` reads, looked at no more than every ``REFRESH_S``.

Reached only through this face: ``_ops`` builds a ``Console`` when the operations port
is open and ``OpsSettings.console`` is on, adds its recorder to the app's observers and
its routes to the port; and for ``eosflow console`` a ``GroupPage``, handing it the look
at the broker (``group_status``) that this room does not make itself.
"""

from ._group import REFRESH_S, GroupPage
from ._page import SNAPSHOT, Console
from ._recorder import EVENTS, TEXT_MAX, WINDOW_S, Recorder

__all__ = [
    "EVENTS",
    "REFRESH_S",
    "SNAPSHOT",
    "TEXT_MAX",
    "WINDOW_S",
    "Console",
    "GroupPage",
    "Recorder",
]
