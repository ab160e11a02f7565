"""``eosflow.Protobuf``: a topic side in Protobuf, its ``.proto`` file in the registry.

Values are instances of a generated message class. After the header come the message
indexes (``_wire``): the path of the message type within the ``.proto`` file registered.
Encoding writes the declared message's path, then ``SerializeToString()``. Decoding
fetches the writer's schema by its id once, as for Avro, finds the path that names the
declared message (its full name, package included) in it -- ``.proto`` text, or the
base64 ``FileDescriptorProto`` that confluent-kafka's serializer registers -- and parses
each body whose indexes are that path with the declared class (``FromString``); indexes
naming another message, or a writer's schema without that message, do not decode.

The schema registered is the ``.proto`` text of the message's file, written from its
descriptor (``proto_text_of``): syntax (proto2 or proto3), package, messages (nested),
enums, fields with their labels (proto3 ``optional``, ``required``, ``repeated``), map
fields as ``map<K, V>``, oneofs, proto2 defaults, ``packed``, reserved numbers and names,
extension ranges and services; types by their full names (``.shop.Order.Line``). Other
options (``java_package``, ``deprecated``...) are left out: they do not change a
record's bytes. Imports of Google's well-known types (``google/protobuf/*.proto``) are
kept, without references (registries know those files); any other import, ``extend``,
groups and editions are refused in one line: give the schema (``schema=``) then. (Not
the base64 descriptor: Apicurio stores it as text, then fails its compatibility check.)
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from .._errors import ConfigError
from ._client import Registry
from ._codec import Reader, SchemaCodec, Schemaful
from ._settings import needs
from ._wire import HEADER_SIZE, message_indexes, read_message_indexes

_SCALARS = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64"}
_SCALARS |= {7: "fixed32", 8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32"}
_SCALARS |= {16: "sfixed64", 17: "sint32", 18: "sint64"}  # FieldDescriptorProto.Type
_GROUP, _REPEATED, _REQUIRED, _STRING, _BYTES = 10, 3, 2, 9, 12
_MAX_FIELD = 536870911
_TOKENS = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[\w.]+|\S", re.S)
_NAME = re.compile(r"[A-Za-z_]\w*")

Names = dict[tuple[int, ...], str]  # a file's message types: path -> full name


class Protobuf(Schemaful):
    """A topic's key or value in Protobuf through the schema registry:
    ``Protobuf(Order)`` (``Order`` a generated message class; its file's ``.proto`` text
    registered) or ``Protobuf(Order, schema=PROTO)`` (the ``.proto`` text given, which
    must declare a message of ``Order``'s full name)."""

    kind = "PROTOBUF"

    def __init__(
        self, message: type[Any], *, schema: str | None = None, subject: str | None = None
    ) -> None:
        base = needs("google.protobuf.message").Message
        if not (isinstance(message, type) and issubclass(message, base)):
            raise ConfigError(
                f"eosflow.Protobuf({message!r}): expected a generated protobuf message class"
            )
        if schema is not None and not isinstance(schema, str):
            raise ConfigError(f"eosflow.Protobuf({message.__name__}): schema is .proto text")
        self.model, self.schema, self.subject = message, schema, subject

    def bind(self, registry: Registry, subject: str, where: str) -> SchemaCodec:
        assert self.model is not None
        text = self.schema if isinstance(self.schema, str) else proto_text_of(self.model, where)
        return _ProtobufCodec(self, registry, subject, text, where)


class _ProtobufCodec(SchemaCodec):
    def __init__(
        self, declared: Protobuf, registry: Registry, subject: str, text: str, where: str
    ) -> None:
        super().__init__(declared, registry, subject, text)
        message: Any = declared.model
        self._full = str(message.DESCRIPTOR.full_name)
        self._names = messages_in(text)
        path = self._path_in(self._names)
        if path is None:
            raise ConfigError(f"{where}: the schema declares no message {self._full}")
        self._indexes = message_indexes(path)
        self._parse = message.FromString

    def _path_in(self, names: Names) -> list[int] | None:
        return next((list(p) for p, name in names.items() if name == self._full), None)

    def encode(self, value: Any) -> bytes:
        return self._indexes + bytes(value.SerializeToString())

    def reader(self, kind: str, text: str) -> Reader:
        names = self._names if text == self.text else messages_in(text)
        path = self._path_in(names)
        if path is None:
            raise ValueError(f"the writer's schema declares no message {self._full}")
        parse, full, first = self._parse, self._full, path == [0]

        def read(data: bytes) -> Any:
            if first and data[HEADER_SIZE : HEADER_SIZE + 1] == b"\x00":
                return parse(data[HEADER_SIZE + 1 :])
            indexes, at = read_message_indexes(data)
            if indexes != path:
                named = names.get(tuple(indexes), "no message of the writer's schema")
                raise ValueError(f"message indexes {indexes} name {named}, not {full}")
            return parse(data[at:])

        return read


def messages_in(text: str) -> Names:
    """The message types a schema declares, by their path (the message indexes) --
    ``.proto`` text, or a base64 ``FileDescriptorProto``; map fields' entries count
    where they are written, as protoc nests them."""
    if re.fullmatch(r"[A-Za-z0-9+/=\s]+", text):
        pb, decoding = needs("google.protobuf.descriptor_pb2"), needs("google.protobuf.message")
        try:
            file = pb.FileDescriptorProto.FromString(base64.b64decode(text))
        except (binascii.Error, ValueError, decoding.DecodeError):
            return {}
        names: Names = {}
        _walk(file.message_type, f"{file.package}." if file.package else "", (), names)
        return names
    return _scan(text)


def _walk(messages: Any, prefix: str, path: tuple[int, ...], names: Names) -> None:
    for i, m in enumerate(messages):
        names[(*path, i)] = prefix + m.name
        _walk(m.nested_type, f"{prefix}{m.name}.", (*path, i), names)


def _scan(text: str) -> Names:
    """``messages_in`` of ``.proto`` text: its tokens, comments and strings aside."""
    tokens = [t for t in _TOKENS.findall(text) if not t.startswith(("//", "/*"))]
    package, names = "", Names()
    blocks: list[tuple[tuple[int, ...], str] | None] = [((), "")]  # None: not a message's
    counts = [0]  # the message types nested so far in each open block
    for i, token in enumerate(tokens):
        top, before, entry = blocks[-1], tokens[max(i - 4, 0) : i], ""
        if token == "package" and len(blocks) == 1 and i + 1 < len(tokens):
            package = tokens[i + 1] + "."
        elif token == "}" and len(blocks) > 1:
            blocks.pop()
            counts.pop()
        elif token == "map" and top is not None and tokens[i + 1 : i + 2] == ["<"]:
            if ">" in tokens[i:] and tokens.index(">", i) + 1 < len(tokens):
                field = tokens[tokens.index(">", i) + 1]
                entry = "".join(p[:1].upper() + p[1:] for p in field.split("_")) + "Entry"
        elif token == "{":
            if top is not None and len(before) >= 2 and before[-2] == "message":
                entry = before[-1]  # message Name {
            elif top is not None and len(blocks) > 1 and before[:1] == ["group"]:
                entry = before[1]  # group Name = 1 {
            if top is None or not _NAME.fullmatch(entry):
                blocks.append(None)
                counts.append(0)
                continue
        if entry and top is not None:
            path = (*top[0], counts[-1])
            counts[-1] += 1
            names[path] = top[1] + entry
            if token == "{":
                blocks.append((path, f"{top[1]}{entry}."))
                counts.append(0)
    return {path: package + name for path, name in names.items()}


def proto_text_of(message: type[Any], where: str = "") -> str:
    """The ``.proto`` text of ``message``'s file (see the module doc for what is kept)."""
    file = needs("google.protobuf.descriptor_pb2").FileDescriptorProto()
    message.DESCRIPTOR.file.CopyToProto(file)
    return _Writer(file, where or f"eosflow.Protobuf({message.__name__})").text


class _Writer:
    def __init__(self, file: Any, where: str) -> None:
        self.where, self.lines = where, list[str]()
        syntax = file.syntax or "proto2"
        if syntax not in ("proto2", "proto3"):
            self.refuse(f"syntax {syntax!r}")
        self.proto3 = syntax == "proto3"
        self.lines = [f'syntax = "{syntax}";']
        if file.package:
            self.lines.append(f"package {file.package};")
        for i, dep in enumerate(file.dependency):
            if not dep.startswith("google/protobuf/"):
                self.refuse(f"import {dep!r} (only google/protobuf/ well-known types)")
            public = "public " if i in file.public_dependency else ""
            self.lines.append(f'import {public}"{dep}";')
        self.lines.append("")
        if file.extension:
            self.refuse("extend")
        prefix = f".{file.package}" if file.package else ""
        for m in file.message_type:
            self.message(m, "", prefix)
        for e in file.enum_type:
            self.enum(e, "")
        for s in file.service:
            self.lines.append(f"service {s.name} {{")
            for r in s.method:
                ins, outs = ("stream " * x for x in (r.client_streaming, r.server_streaming))
                returns = f"returns ({outs}{r.output_type})"
                self.lines.append(f"  rpc {r.name} ({ins}{r.input_type}) {returns};")
            self.lines.append("}")
        self.text = "\n".join(self.lines) + "\n"

    def refuse(self, what: str) -> None:
        raise ConfigError(
            f"{self.where}: {what} is not supported in a generated schema; give it (schema=...)"
        )

    def message(self, m: Any, pad: str, scope: str) -> None:
        full, inner, lines = f"{scope}.{m.name}", pad + "  ", self.lines
        if m.extension:
            self.refuse(f"extend in {full[1:]}")
        lines.append(f"{pad}message {m.name} {{")
        maps = {f"{full}.{n.name}" for n in m.nested_type if n.options.map_entry}
        done: set[int] = set()
        for f in m.field:
            oneof = f.HasField("oneof_index") and not f.proto3_optional
            if f.type_name in maps or (oneof and f.oneof_index in done):
                continue
            if not oneof:
                lines.append(inner + self.field(f, False))
                continue
            done.add(f.oneof_index)
            lines.append(f"{inner}oneof {m.oneof_decl[f.oneof_index].name} {{")
            for g in m.field:
                if g.HasField("oneof_index") and g.oneof_index == f.oneof_index:
                    lines.append(f"{inner}  {self.field(g, True)}")
            lines.append(inner + "}")
        for n in m.nested_type:  # map fields where their entries are, as protoc nests them
            if f"{full}.{n.name}" not in maps:
                self.message(n, inner, full)
                continue
            key, value = self.type(n.field[0]), self.type(n.field[1])
            for f in m.field:
                if f.type_name == f"{full}.{n.name}":
                    lines.append(f"{inner}map<{key}, {value}> {f.name} = {f.number};")
        for e in m.enum_type:
            self.enum(e, inner)
        for x in m.extension_range:
            end = "max" if x.end > _MAX_FIELD else x.end - 1
            lines.append(f"{inner}extensions {x.start} to {end};")
        self.reserved(m, inner, 1)
        lines.append(pad + "}")

    def enum(self, e: Any, pad: str) -> None:
        self.lines.append(f"{pad}enum {e.name} {{")
        if e.options.allow_alias:
            self.lines.append(f"{pad}  option allow_alias = true;")
        self.lines += [f"{pad}  {v.name} = {v.number};" for v in e.value]
        self.reserved(e, pad + "  ", 0)
        self.lines.append(pad + "}")

    def reserved(self, d: Any, pad: str, exclusive: int) -> None:
        spans = [(r.start, r.end - exclusive) for r in d.reserved_range]
        ranges = [str(a) if a == b else f"{a} to {b}" for a, b in spans]
        if ranges:
            self.lines.append(f"{pad}reserved {', '.join(ranges)};")
        if d.reserved_name:
            self.lines.append(f"{pad}reserved {', '.join(_quoted(n) for n in d.reserved_name)};")

    def field(self, f: Any, in_oneof: bool) -> str:
        if f.type == _GROUP:
            self.refuse(f"the group {f.name}")
        label = ""
        if f.label in (_REPEATED, _REQUIRED):
            label = "repeated " if f.label == _REPEATED else "required "
        elif f.proto3_optional or not (self.proto3 or in_oneof):
            label = "optional "
        options = []
        if f.HasField("default_value"):
            v = f.default_value
            quoted = _quoted(v) if f.type == _STRING else f'"{v}"' if f.type == _BYTES else v
            options.append(f"default = {quoted}")
        if f.options.HasField("packed"):
            options.append(f"packed = {str(f.options.packed).lower()}")
        extra = f" [{', '.join(options)}]" if options else ""
        return f"{label}{self.type(f)} {f.name} = {f.number}{extra};"

    def type(self, f: Any) -> str:
        return _SCALARS.get(f.type) or str(f.type_name)


def _quoted(s: str) -> str:
    """``s`` as a ``.proto`` string literal (C escapes, UTF-8 octets kept)."""
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif c.isprintable():
            out.append(c)
        else:
            out.append("".join(f"\\{b:03o}" for b in c.encode()))
    return '"' + "".join(out) + '"'
