"""The typed-records room: what a processor declares of its topics' keys and values
(``Topic``, ``Model``), and ``Typing``, which decodes the records of declared input
topics before ``process`` and encodes outputs by their topic's declaration. The
engine builds one ``Typing`` per app and reaches nothing else here.

- ``_codecs``: bytes, ``str``, pydantic models (``Model``: JSON, validated) and any
  ``Serde`` as one codec shape; ``model_json``, a model's JSON; ``as_bytes``, an
  undeclared output side as bytes (a ``str``, a model); ``declared_model``, the
  model a declaration decodes to (the Spark room's typed frames);
- ``_typing``: ``Topic``, ``Typing`` (the decode wrapper, the output encoder, the
  one-line ``DecodeError``).
"""

from ._codecs import Model, as_bytes, declared_model, model_json
from ._typing import Topic, Typing

__all__ = ["Model", "Topic", "Typing", "as_bytes", "declared_model", "model_json"]
