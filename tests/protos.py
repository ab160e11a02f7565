"""Protobuf message classes for the tests, built from ``FileDescriptorProto``s in Python
(``descriptor_pb2`` + ``message_factory.GetMessageClass``) as protoc would describe the
same ``.proto`` files: no protoc, no generated ``_pb2`` modules, no new dependency. Each
file goes into a pool of its own, so versions of one file live side by side.

``order_file()`` is ``shop/order.proto`` (proto3), written out here as protoc nests it
-- map entries among the nested messages where their fields are written::

    message Order {
      int64 id = 1; string customer = 2; int32 qty = 3; repeated string tags = 4;
      map<string, int64> counts = 5;      // Order.CountsEntry, nested type 0
      optional string note = 6; Kind kind = 7;
      message Line { string sku = 1; int32 qty = 2; }   // nested type 1
      repeated Line lines = 8;
      oneof pay { string card = 9; int64 cash = 10; }
      map<string, double> prices = 11;    // Order.PricesEntry, nested type 2
      enum Status { STATUS_UNSPECIFIED = 0; OPEN = 1; }
      Status status = 12;
    }
    message Total { int64 id = 1; string customer = 2; int64 doubled = 3; }
    enum Kind { KIND_UNSPECIFIED = 0; RETAIL = 1; TRADE = 2; }

``legacy_file()`` is a proto2 file with what proto2 adds (required, defaults, packed,
reserved, extension ranges, an aliased enum, a service).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def field(name: str, number: int, kind: int, *, repeated: bool = False, **kw: Any) -> Any:
    label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
    return F(name=name, number=number, type=kind, label=label, **kw)


def _map_entry(message: Any, name: str, key: int, value: int) -> None:
    entry = message.nested_type.add(name=name)
    entry.options.map_entry = True
    entry.field.extend([field("key", 1, key), field("value", 2, value)])


def order_file(
    *, more: bool = False, customer: int = F.TYPE_STRING
) -> descriptor_pb2.FileDescriptorProto:
    """``shop/order.proto``; ``more`` adds ``string channel = 13`` to Order (a compatible
    next version), ``customer`` changes that field's type (an incompatible one)."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="shop/order.proto", package="shop", syntax="proto3"
    )
    order = fdp.message_type.add(name="Order")
    order.field.extend(
        [
            field("id", 1, F.TYPE_INT64),
            field("customer", 2, customer),
            field("qty", 3, F.TYPE_INT32),
            field("tags", 4, F.TYPE_STRING, repeated=True),
            field("counts", 5, F.TYPE_MESSAGE, repeated=True, type_name=".shop.Order.CountsEntry"),
            field("note", 6, F.TYPE_STRING, proto3_optional=True, oneof_index=1),
            field("kind", 7, F.TYPE_ENUM, type_name=".shop.Kind"),
            field("lines", 8, F.TYPE_MESSAGE, repeated=True, type_name=".shop.Order.Line"),
            field("card", 9, F.TYPE_STRING, oneof_index=0),
            field("cash", 10, F.TYPE_INT64, oneof_index=0),
            field("prices", 11, F.TYPE_MESSAGE, repeated=True, type_name=".shop.Order.PricesEntry"),
            field("status", 12, F.TYPE_ENUM, type_name=".shop.Order.Status"),
        ]
    )
    if more:
        order.field.append(field("channel", 13, F.TYPE_STRING))
    order.oneof_decl.add(name="pay")
    order.oneof_decl.add(name="_note")  # proto3 optional's synthetic oneof
    _map_entry(order, "CountsEntry", F.TYPE_STRING, F.TYPE_INT64)
    line = order.nested_type.add(name="Line")
    line.field.extend([field("sku", 1, F.TYPE_STRING), field("qty", 2, F.TYPE_INT32)])
    _map_entry(order, "PricesEntry", F.TYPE_STRING, F.TYPE_DOUBLE)
    status = order.enum_type.add(name="Status")
    status.value.add(name="STATUS_UNSPECIFIED", number=0)
    status.value.add(name="OPEN", number=1)
    total = fdp.message_type.add(name="Total")
    total.field.extend(
        [
            field("id", 1, F.TYPE_INT64),
            field("customer", 2, F.TYPE_STRING),
            field("doubled", 3, F.TYPE_INT64),
        ]
    )
    kind = fdp.enum_type.add(name="Kind")
    for number, name in enumerate(["KIND_UNSPECIFIED", "RETAIL", "TRADE"]):
        kind.value.add(name=name, number=number)
    return fdp


def legacy_file() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name="legacy.proto", package="legacy")
    item = fdp.message_type.add(name="Item")
    item.field.extend(
        [
            F(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_REQUIRED),
            field("name", 2, F.TYPE_STRING, default_value='say "hi"'),
            field("codes", 3, F.TYPE_INT32, repeated=True),
            field("mode", 4, F.TYPE_ENUM, type_name=".legacy.Mode", default_value="B"),
        ]
    )
    item.field[2].options.packed = True
    item.reserved_range.add(start=5, end=6)
    item.reserved_range.add(start=8, end=11)
    item.reserved_name.append("old")
    item.extension_range.add(start=100, end=536870912)  # 100 to max
    mode = fdp.enum_type.add(name="Mode")
    mode.options.allow_alias = True
    for name, number in [("A", 0), ("B", 1), ("ALSO_B", 1)]:
        mode.value.add(name=name, number=number)
    mode.reserved_range.add(start=7, end=7)
    lookup = fdp.service.add(name="Lookup")
    lookup.method.add(
        name="Find", input_type=".legacy.Item", output_type=".legacy.Item", server_streaming=True
    )
    return fdp


def classes(
    fdp: descriptor_pb2.FileDescriptorProto, *imported: descriptor_pb2.FileDescriptorProto
) -> dict[str, Any]:
    """The message classes of ``fdp`` by full name (nested ones too), from a pool of
    their own (with the files it imports, ``imported``)."""
    pool = descriptor_pool.DescriptorPool()
    for file in (*imported, fdp):
        pool.Add(file)
    found: dict[str, Any] = {}

    def add(descriptor: Any) -> None:
        found[descriptor.full_name] = message_factory.GetMessageClass(descriptor)
        for nested in descriptor.nested_types:
            add(nested)

    for top in pool.FindFileByName(fdp.name).message_types_by_name.values():
        add(top)
    return found
