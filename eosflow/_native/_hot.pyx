# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The hot paths compiled (see the face): ``_reference`` step for step, with the fields
of ``Output``, ``Record`` and the adapter's batch read at their slots' offsets, as
CPython's own specialised attribute reads do, instead of through ``getattr``."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint32_t, uint64_t
from ._slots cimport _at

from .._records import Output, Record
from ._reference import Corrupt, Oversize
from ._reference import murmur2 as _reference_murmur2


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    object PyObject_Vectorcall(object callable, PyObject** args, size_t nargsf, PyObject* kwnames)
    Py_ssize_t PyList_GET_SIZE(object)
    PyObject* PyList_GET_ITEM(object, Py_ssize_t)


cdef extern from "structmember.h":
    int T_OBJECT
    int T_OBJECT_EX


cdef list _NO_HEADERS = []  # shared, never mutated
_MEMBER = type(Output.__dict__["topic"])  # member_descriptor: a slot's descriptor


cdef Py_ssize_t _slot(object cls, str name) except -1:
    """The offset in an instance of ``cls`` of its slot ``name``, which holds an object
    (msgspec's fields and ``__slots__`` are such member descriptors); else TypeError."""
    member = getattr(cls, "__dict__", {}).get(name)
    if type(member) is not _MEMBER:
        raise TypeError(f"{cls!r}.{name} is not a slot")
    kind = (<PyMemberDescrObject*><PyObject*>member).d_member.type
    if kind != T_OBJECT_EX and kind != T_OBJECT:
        raise TypeError(f"{cls!r}.{name} is a slot of another kind than an object")
    return (<PyMemberDescrObject*><PyObject*>member).d_member.offset


cdef object _Output = Output
cdef object _Record = Record
cdef Py_ssize_t O_TOPIC = _slot(Output, "topic")
cdef Py_ssize_t O_PARTITION = _slot(Output, "partition")
cdef Py_ssize_t O_KEY = _slot(Output, "key")
cdef Py_ssize_t O_VALUE = _slot(Output, "value")
cdef Py_ssize_t O_HEADERS = _slot(Output, "headers")
cdef Py_ssize_t O_TIMESTAMP = _slot(Output, "timestamp")
cdef Py_ssize_t R_KEY = _slot(Record, "key")
cdef Py_ssize_t R_VALUE = _slot(Record, "value")
cdef object _Batch = None
cdef Py_ssize_t B_ADD = -1
cdef Py_ssize_t B_COUNT = -1


cdef inline uint32_t _murmur2(bytes data):
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t words = n >> 2, tail = n & 3, i, j
    cdef uint32_t m = 0x5BD1E995, h = 0x9747B28C ^ <uint32_t>n, k
    for i in range(words):
        j = i << 2
        k = (<uint32_t>p[j] | (<uint32_t>p[j + 1] << 8) | (<uint32_t>p[j + 2] << 16)
             | (<uint32_t>p[j + 3] << 24))
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
    j = words << 2
    if tail == 3:
        h ^= <uint32_t>p[j + 2] << 16
    if tail >= 2:
        h ^= <uint32_t>p[j + 1] << 8
    if tail >= 1:
        h ^= <uint32_t>p[j]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h


def murmur2(data):
    if isinstance(data, bytes):
        return _murmur2(<bytes>data)
    return _reference_murmur2(data)  # bytearray, memoryview: as the reference takes them


def slot_offset(cls, name):
    """``_slot`` for the other compiled module (``_stores``), at its binds."""
    return _slot(cls, name)


def bind_batch(batch_type):
    global _Batch, B_ADD, B_COUNT
    B_ADD = _slot(batch_type, "_add")
    B_COUNT = _slot(batch_type, "count")
    _Batch = batch_type


def fill(list outputs not None, Py_ssize_t start, dict open_ not None, dict lists not None,
         Py_ssize_t max_bytes):
    if _Batch is None:
        raise RuntimeError("fill before bind_batch")
    if start < 0:
        raise ValueError(f"fill from {start}")
    cdef Py_ssize_t i = start, at, parts = 0
    cdef object o, topic, partition, key, value, timestamp, add, batch, meta, headers, count
    cdef PyObject* slot
    cdef PyObject** count_slot
    cdef PyObject* args[5]
    cdef object run_topic = None, run_partition = None, run_batch = None  # the last output's
    cdef object hashed_topic = None  # the topic of the last partition-less output:
    cdef tuple listed = None         # its partitions (a copy: nothing else changes it),
    cdef list hashed = None          # and their batches met in this call, by index
    # the length is read every time: the Python that runs here (an output's headers
    # iterated, a topic compared) could change the list
    while i < PyList_GET_SIZE(outputs):
        o = <object>PyList_GET_ITEM(outputs, i)
        if type(o) is not _Output:
            return i
        slot = _at(o, O_TOPIC)
        if slot is NULL:
            return i
        topic = <object>slot
        slot = _at(o, O_KEY)
        if slot is NULL:
            return i
        key = <object>slot
        slot = _at(o, O_PARTITION)
        if slot is NULL:
            return i
        if <object>slot is None:
            if type(key) is not bytes:
                return i
            if hashed_topic is None or not (topic is hashed_topic or topic == hashed_topic):
                found = lists.get(topic)
                if type(found) is not list or not found:
                    return i
                hashed_topic, listed = topic, tuple(<list>found)
                parts = len(listed)
                hashed = [None] * parts
            at = (_murmur2(<bytes>key) & 0x7FFFFFFF) % parts
            batch = hashed[at]
            if batch is None:
                batch = open_.get((topic, listed[at]))
                if batch is None or type(batch) is not _Batch:
                    return i
                hashed[at] = batch
        else:
            partition = <object>slot
            if run_batch is not None and (topic is run_topic or topic == run_topic) and (
                partition is run_partition or partition == run_partition
            ):
                batch = run_batch
            else:
                batch = open_.get((topic, partition))
                if batch is None or type(batch) is not _Batch:
                    return i
                run_topic, run_partition, run_batch = topic, partition, batch
        slot = _at(o, O_HEADERS)
        if slot is NULL:
            return i
        headers = list(<object>slot) if <object>slot else _NO_HEADERS
        # every argument held here for the call: code it runs (a timestamp's __int__)
        # could replace the fields or the batch's slots meanwhile
        slot = _at(o, O_TIMESTAMP)
        if slot is NULL:
            return i
        timestamp = <object>slot
        slot = _at(o, O_VALUE)
        if slot is NULL:
            return i
        value = <object>slot
        count_slot = <PyObject**>((<char*><PyObject*>batch) + B_COUNT)
        slot = _at(batch, B_ADD)
        if count_slot[0] is NULL or slot is NULL:
            return i
        add = <object>slot
        count = <object>count_slot[0]
        args[0] = <PyObject*>count
        args[1] = <PyObject*>timestamp
        args[2] = <PyObject*>key
        args[3] = <PyObject*>value
        args[4] = <PyObject*>headers
        try:
            meta = PyObject_Vectorcall(add, args, 5, NULL)
        except TypeError:
            return i
        if meta is None:
            return i
        slot = count_slot[0]  # read again, as the reference's ``+=`` does
        if slot is NULL:
            return i
        count = <object>slot + 1
        Py_INCREF(count)
        count_slot[0] = <PyObject*>count
        Py_XDECREF(slot)
        if meta.size > max_bytes:
            raise Oversize(i, meta.size)
        i += 1
    return i


cdef inline Py_ssize_t _length(PyObject* slot) except -1:
    """``len(x or b"")`` of a slot's object (NULL: 0)."""
    if slot is NULL:
        return 0
    if type(<object>slot) is bytes:
        return PyBytes_GET_SIZE(<object>slot)
    return len(<object>slot or b"")


def byte_count(records):
    cdef Py_ssize_t size = 0
    for r in records:
        if type(r) is not _Record:
            size += len(r.value or b"") + len(r.key or b"")
        else:
            size += _length(_at(r, R_VALUE)) + _length(_at(r, R_KEY))
    return size


# --- consumed record batches ----------------------------------------------------------

cdef inline int64_t _int(const unsigned char* p, int size) noexcept:
    """A big-endian signed integer of ``size`` bytes (2, 4 or 8)."""
    cdef uint64_t v = 0
    cdef int k
    for k in range(size):
        v = (v << 8) | p[k]
    if size == 2:
        return <int64_t><short>v
    if size == 4:
        return <int64_t><int>v
    return <int64_t>v


cdef inline int64_t _varint(const unsigned char* data, Py_ssize_t* at, Py_ssize_t end) except? -1:
    """Kafka's zigzag varint (up to 10 bytes: a varlong) at ``at``, which moves past it."""
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        if at[0] >= end or shift > 63:
            raise Corrupt("a varint runs past its record")
        b = data[at[0]]
        at[0] += 1
        raw |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            break
        shift += 7
    return <int64_t>(raw >> 1) ^ -(<int64_t>(raw & 1))


cdef inline object _bytes(const unsigned char* data, Py_ssize_t* at, Py_ssize_t end):
    """The length-prefixed bytes at ``at`` (a negative length: None)."""
    cdef int64_t n = _varint(data, at, end)
    if n < 0:
        return None
    if n > end - at[0]:
        raise Corrupt("a field runs past its record")
    out = PyBytes_FromStringAndSize(<const char*>data + at[0], <Py_ssize_t>n)
    at[0] += <Py_ssize_t>n
    return out


def decode_batch(bytes raw not None, Py_ssize_t pos, object topic, object partition,
                 int64_t fetch_offset):
    cdef const unsigned char* data = <const unsigned char*>PyBytes_AS_STRING(raw)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(raw), end, at, record_end
    cdef int64_t length, base_offset, first_ts, max_ts, count, k, record_length, offset, ts_delta
    cdef int64_t headers_n, h
    cdef int attributes
    cdef bint log_append
    if pos < 0 or pos > size - 61:
        raise Corrupt("a batch header runs past the fetch")
    base_offset = _int(data + pos, 8)
    length = _int(data + pos + 8, 4)
    end = pos + 12 + <Py_ssize_t>length
    if length < 49 or end > size:
        raise Corrupt("a batch runs past the fetch")
    if data[pos + 16] != 2:
        raise Corrupt("not a v2 record batch")
    attributes = <int>_int(data + pos + 21, 2)
    if attributes & 0x07:
        raise Corrupt("a compressed batch (decode it through aiokafka)")
    log_append = (attributes & 0x08) != 0
    first_ts = _int(data + pos + 27, 8)
    max_ts = _int(data + pos + 35, 8)
    count = _int(data + pos + 57, 4)
    at = pos + 61
    cdef list out = []
    cdef object key, value, headers, hkey, hvalue
    cdef list pairs
    for k in range(count):
        record_length = _varint(data, &at, end)
        if record_length < 0 or record_length > end - at:
            raise Corrupt("a record runs past its batch")
        record_end = at + <Py_ssize_t>record_length
        at += 1  # the record's attributes: unused
        ts_delta = _varint(data, &at, record_end)
        offset = base_offset + _varint(data, &at, record_end)
        key = _bytes(data, &at, record_end)
        value = _bytes(data, &at, record_end)
        headers_n = _varint(data, &at, record_end)
        if headers_n < 0:
            raise Corrupt("a record with a negative header count")
        if headers_n > 0:
            pairs = []
            for h in range(headers_n):
                hkey = _bytes(data, &at, record_end)
                if hkey is None:
                    raise Corrupt("a header without a key")
                hvalue = _bytes(data, &at, record_end)
                pairs.append(((<bytes>hkey).decode("utf-8"), hvalue))
            headers = tuple(pairs)
        else:
            headers = ()
        if at != record_end:
            raise Corrupt("a record's fields do not fill its length")
        if offset < fetch_offset:  # below the fetch offset, or not past the last one kept
            continue
        fetch_offset = offset + 1
        out.append(_Record(topic, partition, offset, key, value, headers,
                           max_ts if log_append else first_ts + ts_delta))
    if at != end:
        raise Corrupt("bytes left in a batch after its records")
    return out
