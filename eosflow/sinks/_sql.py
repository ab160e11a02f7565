"""Names in the sink's SQL: every table and column name is quoted, so a name that is a
reserved word (``order``, ``user``) works as any other.

A table name the user gives (``into``, ``offsets_table``: letters, digits and ``_``,
optionally ``schema.table``) is folded to lower case first, as PostgreSQL folds a name
left unquoted: ``into = "Orders"`` writes the table a user's ``SELECT * FROM Orders``
reads. A column name comes from the catalog as it is, quoted as it is.
"""

from __future__ import annotations

__all__ = ["quoted", "table_name"]


def quoted(name: str) -> str:
    """``name`` as a quoted SQL identifier, exactly as spelled."""
    return '"' + name.replace('"', '""') + '"'


def table_name(name: str) -> str:
    """A user's table name (``schema.table`` or ``table``) as SQL: each part folded to
    lower case and quoted."""
    return ".".join(quoted(part.lower()) for part in name.split("."))
