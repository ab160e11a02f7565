"""``eosflow.Protobuf`` without a registry: the message indexes both ways (the single 0
of the first message, a nested message's path, checked against confluent-kafka's own
encoder and decoder), the ``.proto`` text written from a message's descriptor, the
message types a schema declares found by their indexes (in text and in the base64
``FileDescriptorProto`` confluent-kafka registers), and decoding that takes only the
declared message. The message classes come from ``tests/protos.py``. The comment above
each test names the mutation it caught."""

from __future__ import annotations

import base64
import io
from typing import Any

import protos
import pytest
from confluent_kafka.schema_registry.common.serde import SchemaId
from confluent_kafka.schema_registry.protobuf import _create_index_array
from google.protobuf import timestamp_pb2

import eosflow
from eosflow._schemas import Registry, messages_in, proto_text_of
from eosflow._schemas._wire import message_indexes, read_message_indexes

ORDER = protos.classes(protos.order_file())
Order, Line, Total = ORDER["shop.Order"], ORDER["shop.Order.Line"], ORDER["shop.Total"]
Item = protos.classes(protos.legacy_file())["legacy.Item"]
HEADER = b"\x00\x00\x00\x00\x07"  # schema id 7

ORDER_PROTO = """\
syntax = "proto3";
package shop;

message Order {
  int64 id = 1;
  string customer = 2;
  int32 qty = 3;
  repeated string tags = 4;
  optional string note = 6;
  .shop.Kind kind = 7;
  repeated .shop.Order.Line lines = 8;
  oneof pay {
    string card = 9;
    int64 cash = 10;
  }
  .shop.Order.Status status = 12;
  map<string, int64> counts = 5;
  message Line {
    string sku = 1;
    int32 qty = 2;
  }
  map<string, double> prices = 11;
  enum Status {
    STATUS_UNSPECIFIED = 0;
    OPEN = 1;
  }
}
message Total {
  int64 id = 1;
  string customer = 2;
  int64 doubled = 3;
}
enum Kind {
  KIND_UNSPECIFIED = 0;
  RETAIL = 1;
  TRADE = 2;
}
"""


def codec_of(message: Any, schema: str | None = None) -> Any:
    """``Protobuf(message)`` bound to a registry that is never asked (nothing here
    reaches it)."""
    registry = Registry(eosflow.SchemaRegistrySettings(url="http://127.0.0.1:9"))
    return eosflow.Protobuf(message, schema=schema).bind(registry, "orders-value", "Shop")


def indexes_by_confluent(path: list[int]) -> bytes:
    out = io.BytesIO()
    SchemaId._encode_varints(out, path, zigzag=True)
    return out.getvalue()


def indexes_read_by_confluent(data: bytes) -> list[int]:
    return SchemaId._read_index_array(io.BytesIO(data), zigzag=True)  # type: ignore[no-any-return]


# The first message's indexes are the single byte 0; any other path is its count, then
# each index, zigzag varints -- as confluent-kafka writes and reads them. Caught: the
# [0] shortcut removed (b"\x02\x00" written: confluent reads it, but it is not the
# form the spec and every serializer write); a count of 0 not read as [0] (read as []);
# the zigzag decoding left off ([1] read back as a count of 2).
@pytest.mark.parametrize("path", [[0], [1], [0, 1], [2, 0, 3], [64], [300, 7]])
def test_message_indexes_both_ways_as_confluent_writes_and_reads_them(path: list[int]) -> None:
    written = message_indexes(path)
    assert written == indexes_by_confluent(path)
    assert indexes_read_by_confluent(written + b"body") == path
    assert read_message_indexes(HEADER + written + b"body") == (path, 5 + len(written))
    assert (written == b"\x00") is (path == [0])


# Decoding takes the single 0 and the explicit [0] (count 1, index 0) alike for the
# first message; the declared message's path is written before its body. Caught: the
# indexes left off what encode writes; the zigzag decoding left off (the explicit [0]
# then read as a count of 2, cut short).
def test_the_first_message_reads_from_either_form_of_its_indexes() -> None:
    codec = codec_of(Order)
    order = Order(id=5, customer="c", tags=["a"], counts={"x": 2}, note="", card="v")
    body = order.SerializeToString()
    assert codec.encode(order) == b"\x00" + body
    read = codec.reader("PROTOBUF", codec.text)
    assert read(HEADER + b"\x00" + body) == order
    assert read(HEADER + b"\x02\x00" + body) == order


# A nested message's path, and a second top-level message's. Caught: map fields written
# among the plain fields (Line was then written at [0, 2]: PricesEntry came before it in
# the text).
def test_a_nested_message_is_written_and_read_at_its_path() -> None:
    codec = codec_of(Line)
    line = Line(sku="a", qty=2)
    written = codec.encode(line)
    assert _create_index_array(Line.DESCRIPTOR) == [0, 1]  # confluent's own reckoning
    assert written == b"\x04\x00\x02" + line.SerializeToString()
    assert codec.reader("PROTOBUF", codec.text)(HEADER + written) == line
    second = codec_of(Total)
    assert second.encode(Total(id=1)) == b"\x02\x02" + Total(id=1).SerializeToString()


# The .proto text of a file with a nested message, a nested enum, repeated fields, maps,
# a proto3 optional and a oneof. Caught: map fields written among the plain fields (then
# PricesEntry came before Line when the text is read, and Line's indexes in the text were
# [0, 2] where its descriptor, confluent's reckoning, has [0, 1]); proto3 optional's
# "optional" left off (the field lost its presence).
def test_the_proto_text_of_a_message_file() -> None:
    text = proto_text_of(Order)
    assert text == ORDER_PROTO
    assert proto_text_of(Total) == text  # the whole file, whichever message
    found = messages_in(text)
    assert found == {
        (0,): "shop.Order",
        (0, 0): "shop.Order.CountsEntry",
        (0, 1): "shop.Order.Line",
        (0, 2): "shop.Order.PricesEntry",
        (1,): "shop.Total",
    }
    for message in ORDER.values():  # the paths in the text are the descriptor's
        path = next(p for p, name in found.items() if name == message.DESCRIPTOR.full_name)
        assert list(path) == _create_index_array(message.DESCRIPTOR)


# Caught: a message's reserved range written with its exclusive end ("8 to 11").
def test_the_proto_text_of_a_proto2_file() -> None:
    assert proto_text_of(Item) == (
        'syntax = "proto2";\n'
        "package legacy;\n"
        "\n"
        "message Item {\n"
        "  required int64 id = 1;\n"
        '  optional string name = 2 [default = "say \\"hi\\""];\n'
        "  repeated int32 codes = 3 [packed = true];\n"
        "  optional .legacy.Mode mode = 4 [default = B];\n"
        "  extensions 100 to max;\n"
        "  reserved 5, 8 to 10;\n"
        '  reserved "old";\n'
        "}\n"
        "enum Mode {\n"
        "  option allow_alias = true;\n"
        "  A = 0;\n"
        "  B = 1;\n"
        "  ALSO_B = 1;\n"
        "  reserved 7;\n"
        "}\n"
        "service Lookup {\n"
        "  rpc Find (.legacy.Item) returns (stream .legacy.Item);\n"
        "}\n"
    )


# Caught: any import let through (a file importing shop/common.proto was registered
# without the file it needs).
def test_well_known_imports_are_kept_and_others_refused_in_one_line() -> None:
    stamped = protos.order_file()
    stamped.dependency.append("google/protobuf/timestamp.proto")
    at = protos.field("at", 13, protos.F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    stamped.message_type[1].field.append(at)
    timestamp = protos.descriptor_pb2.FileDescriptorProto.FromString(
        timestamp_pb2.DESCRIPTOR.serialized_pb
    )
    text = proto_text_of(protos.classes(stamped, timestamp)["shop.Total"])
    assert 'package shop;\nimport "google/protobuf/timestamp.proto";\n\nmessage Order {' in text
    assert "  .google.protobuf.Timestamp at = 13;\n}\nenum Kind" in text
    common = protos.descriptor_pb2.FileDescriptorProto(
        name="shop/common.proto", package="shop", syntax="proto3"
    )
    common.message_type.add(name="Money")
    fdp = protos.order_file()
    fdp.dependency.append("shop/common.proto")
    with pytest.raises(eosflow.ConfigError) as caught:
        proto_text_of(protos.classes(fdp, common)["shop.Order"])
    message = str(caught.value)
    assert message == (
        "eosflow.Protobuf(Order): import 'shop/common.proto' (only google/protobuf/ "
        "well-known types) is not supported in a generated schema; give it (schema=...)"
    )
    with pytest.raises(eosflow.ConfigError, match="expected a generated protobuf message"):
        eosflow.Protobuf(dict)
    with pytest.raises(eosflow.ConfigError, match="Shop: the schema declares no message shop"):
        codec_of(Order, schema='syntax = "proto3"; message Order { int64 id = 1; }')


# Message types are found in hand-written .proto text whatever else it holds: comments
# and strings naming messages, a oneof, an enum, options, a service. Caught: comments
# not skipped (the commented-out Fake took index 0); strings not skipped (the option's
# "message Quoted { }" took an index).
def test_messages_are_found_in_text_with_comments_strings_and_services() -> None:
    text = """
    syntax = "proto3";  // message Fake {
    package a.b;
    /* message Hidden { } */
    option java_package = "message Quoted { }";
    import "google/protobuf/timestamp.proto";
    message Head { string s = 1 [json_name = "x{"]; }
    message Order {
      enum E { E0 = 0; }
      oneof o { string x = 1; int64 y = 2; }
      map<string, Head> by_name = 3;
      message Inner { message Deep { } }
      int64 map = 4;
    }
    service S { rpc R (Head) returns (Head) { option deprecated = true; } }
    message Tail { }
    """
    assert messages_in(text) == {
        (0,): "a.b.Head",
        (1,): "a.b.Order",
        (1, 0): "a.b.Order.ByNameEntry",
        (1, 1): "a.b.Order.Inner",
        (1, 1, 0): "a.b.Order.Inner.Deep",
        (2,): "a.b.Tail",
    }


# A writer's schema as confluent-kafka's serializer registers it (a base64
# FileDescriptorProto) names its messages too. Caught: that form not read (every record
# confluent wrote then refused: "declares no message").
def test_a_base64_file_descriptor_names_its_messages() -> None:
    fdp = protos.order_file()
    text = base64.standard_b64encode(fdp.SerializeToString()).decode()
    assert messages_in(text) == messages_in(ORDER_PROTO)
    read = codec_of(Total).reader("PROTOBUF", text)
    total = Total(id=1, customer="c", doubled=4)
    assert read(HEADER + b"\x02\x02" + total.SerializeToString()) == total


# Indexes that do not name the declared message do not decode; a writer's file whose
# messages come in another order is read by name. Caught: the indexes not compared
# (Total's body was parsed as an Order, fields 1-3 read as id, customer, qty).
def test_indexes_naming_another_message_do_not_decode() -> None:
    codec = codec_of(Order)
    read = codec.reader("PROTOBUF", codec.text)
    total = Total(id=1, customer="c", doubled=4).SerializeToString()
    with pytest.raises(ValueError, match=r"message indexes \[1\] name shop.Total, not shop.Order"):
        read(HEADER + b"\x02\x02" + total)
    with pytest.raises(ValueError, match=r"\[0, 0\] name shop.Order.CountsEntry, not shop.Order"):
        read(HEADER + b"\x04\x00\x00" + total)
    with pytest.raises(ValueError, match=r"\[7\] name no message of the writer's schema"):
        read(HEADER + b"\x02\x0e" + total)
    with pytest.raises(ValueError, match="cut short"):
        read(HEADER)
    swapped = 'syntax = "proto3"; package shop; message Total { } message Order { }'
    order = Order(id=3, customer="d")
    assert codec.reader("PROTOBUF", swapped)(HEADER + b"\x02\x02" + order.SerializeToString())
    with pytest.raises(ValueError, match=r"the writer's schema declares no message shop\.Order"):
        codec.reader("PROTOBUF", 'syntax = "proto3"; package other; message Order { }')
