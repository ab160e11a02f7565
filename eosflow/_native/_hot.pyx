# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The hot paths compiled (see the face): ``_reference`` step for step, with the fields
of ``Output``, ``Record`` and the adapter's batch read at their slots' offsets, as
CPython's own specialised attribute reads do, instead of through ``getattr``."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdio cimport snprintf
from libc.string cimport memcmp

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


cdef inline PyObject* _at(object o, Py_ssize_t offset) noexcept:
    """The slot's object, borrowed (NULL when unset)."""
    return (<PyObject**>((<char*><PyObject*>o) + offset))[0]


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


# --- a store's point reads and writes --------------------------------------------------
# ``Store``'s raw/get/put/_set (``eosflow._state._store``), step for step, with the
# slots of the store, its ``Layers`` and a ``Writes`` read at their offsets, and a JSON
# integer read and written in C. A store or layers of another class than the ones bound
# (a subclass, a stand-in) takes the Python method instead; writes of another class
# are read through their own methods, and any value but an int in 64 bits goes to the
# serde.

cdef object _Store = None
cdef object _Layers = None
cdef object _Writes = None
cdef object _MISSING = None
cdef bytes _RESERVED = None
cdef object _store_key = None
cdef object _JSON = None
cdef object _py_raw = None, _py_get = None, _py_put = None, _py_set = None
cdef Py_ssize_t S_LAYERS = -1, S_SLOT = -1, S_READ = -1, S_SERDE = -1
cdef Py_ssize_t L_OPEN = -1, L_SEALED = -1, L_UNDO = -1, W_INDEX = -1


cdef inline object _held(object o, Py_ssize_t offset, str name):
    """The slot's object; AttributeError, as Python's read, when it is unset."""
    cdef PyObject* p = _at(o, offset)
    if p is NULL:
        raise AttributeError(f"{type(o).__name__!r} object has no attribute {name!r}")
    return <object>p


cdef inline object _layers_of(object store):
    """The store's layers when every type on the path is the one bound, else None."""
    if type(store) is not _Store:
        return None
    layers = _held(store, S_LAYERS, "_layers")
    if type(layers) is not _Layers:
        return None
    return layers


cdef inline object _find(object layer, object slot, object key):
    """``layer[slot][key]``, or MISSING where either has none (``dict.get`` twice)."""
    writes = (<dict>layer).get(slot) if type(layer) is dict else layer.get(slot)
    if writes is None:
        return _MISSING
    if type(writes) is _Writes:  # a dict: its own get, no lookup of the method
        return (<dict>writes).get(key, _MISSING)
    return writes.get(key, _MISSING)


cdef object _raw(object store, object layers, object key):
    return _through(layers, _held(store, S_SLOT, "_slot"), _held(store, S_READ, "_read"), key)


cdef object _through(object layers, object slot, object read, object key):
    """``key``'s serialized value through the layers, then ``read`` (the local copy)."""
    value = _find(_held(layers, L_OPEN, "open"), slot, key)
    if value is not _MISSING:
        return value
    sealed = _held(layers, L_SEALED, "sealed")
    if sealed:  # (empty but while a transaction commits)
        value = _find(sealed, slot, key)
        if value is not _MISSING:
            return value
    return read(key)


cdef inline bint _plain_key(object key):
    """A bytes key that is not the reserved one: taken as it is."""
    return type(key) is bytes and not (
        PyBytes_GET_SIZE(key) == PyBytes_GET_SIZE(_RESERVED)
        and memcmp(PyBytes_AS_STRING(key), PyBytes_AS_STRING(_RESERVED), PyBytes_GET_SIZE(key)) == 0
    )


cdef object _json_int(bytes data):
    """The int of ``data`` when it is at most 18 decimal digits after an optional '-'
    (what JSON's ``loads`` gives it too, through ``int``), else None: the caller asks
    the serde."""
    cdef const char* p = PyBytes_AS_STRING(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data), i = 0
    cdef long long v = 0
    cdef bint negative = n > 0 and p[0] == c'-'
    if negative:
        i = 1
    if n - i < 1 or n - i > 18:
        return None
    while i < n:
        if p[i] < c'0' or p[i] > c'9':
            return None
        v = v * 10 + (p[i] - c'0')
        i += 1
    return PyLong_FromLongLong(-v if negative else v)


def store_raw(self, key):
    layers = _layers_of(self)
    if layers is None:
        return _py_raw(self, key)
    return _raw(self, layers, key)


def store_get(self, key, default=None):
    layers = _layers_of(self)
    if layers is None:
        return _py_get(self, key, default)
    raw = _raw(self, layers, key if _plain_key(key) else _store_key(key))
    if raw is None:
        return default
    serde = _held(self, S_SERDE, "_serde")
    if serde is _JSON and type(raw) is bytes:
        value = _json_int(<bytes>raw)
        if value is not None:
            return value
    return serde.loads(raw)


cdef object _set(object store, object layers, object key, object data):
    slot = _held(store, S_SLOT, "_slot")
    open_ = _held(layers, L_OPEN, "open")
    writes = (<dict>open_).get(slot) if type(open_) is dict else open_.get(slot)
    if writes is None:
        writes = _Writes()
        open_[slot] = writes
    undo = _held(layers, L_UNDO, "undo")
    if undo is not None:  # while a record is processed: undone if it fails
        undo.append((writes, key, writes.get(key, _MISSING)))
    if type(writes) is _Writes:
        index = _held(writes, W_INDEX, "index")
    else:
        index = writes.index
    if index is not None and key not in writes:  # ranges were read: kept sorted
        index.add(key)
    writes[key] = data


def store_set(self, key, data):
    layers = _layers_of(self)
    if layers is None:
        return _py_set(self, key, data)
    _set(self, layers, key, data)


def store_put(self, key, value):
    cdef long long v
    cdef int overflow = 0
    cdef char digits[24]
    cdef int n
    layers = _layers_of(self)
    if layers is None:
        return _py_put(self, key, value)
    serde = _held(self, S_SERDE, "_serde")
    data = None
    if serde is _JSON and type(value) is int:
        v = PyLong_AsLongLongAndOverflow(value, &overflow)
        if not overflow:
            n = snprintf(digits, sizeof(digits), "%lld", v)
            data = PyBytes_FromStringAndSize(digits, n)
    if data is None:
        data = serde.dumps(value)
    _set(self, layers, key if _plain_key(key) else _store_key(key), data)


def bind_store(store_type, layers_type, writes_type, missing, reserved, store_key, json, python):
    global _Store, _Layers, _Writes, _MISSING, _RESERVED, _store_key, _JSON
    global _py_raw, _py_get, _py_put, _py_set
    global S_LAYERS, S_SLOT, S_READ, S_SERDE, L_OPEN, L_SEALED, L_UNDO, W_INDEX
    if type(reserved) is not bytes:
        raise TypeError("the reserved key is bytes")
    # every offset found before any is set: a failing bind leaves the last one whole
    offsets = (
        _slot(store_type, "_layers"), _slot(store_type, "_slot"), _slot(store_type, "_read"),
        _slot(store_type, "_serde"), _slot(layers_type, "open"), _slot(layers_type, "sealed"),
        _slot(layers_type, "undo"), _slot(writes_type, "index"),
    )
    methods = (python["raw"], python["get"], python["put"], python["_set"])
    S_LAYERS, S_SLOT, S_READ, S_SERDE, L_OPEN, L_SEALED, L_UNDO, W_INDEX = offsets
    _py_raw, _py_get, _py_put, _py_set = methods
    _Store, _Layers, _Writes = store_type, layers_type, writes_type
    _MISSING, _RESERVED, _store_key, _JSON = missing, reserved, store_key, json
    return {"raw": store_raw, "get": store_get, "put": store_put, "_set": store_set}


# --- a processor's per-record lookups ---------------------------------------------------
# ``Processor.state``, ``window`` and ``table`` (``eosflow._processor``) where they find
# what they look for at once: the app's seat in its context variable, made for this
# processor, holding the handle by name. Anything else -- no seat, another processor's
# (a pipeline's stage), a name not found, not a str -- takes the Python method, which
# does the same lookup first.

cdef extern from "Python.h":
    int PyContextVar_Get(object var, PyObject* default_value, PyObject** value) except -1

cdef object _Seat = None
cdef object _CURRENT = None
cdef object _py_state = None, _py_window = None, _py_table = None
cdef Py_ssize_t SEAT_PROCESSOR = -1, SEAT_STORES = -1, SEAT_WINDOWS = -1, SEAT_TABLES = -1


cdef inline object _seat_for(object processor):
    """The context's seat when it is of the class bound and made for ``processor``."""
    cdef PyObject* value = NULL
    PyContextVar_Get(_CURRENT, NULL, &value)
    if value is NULL:
        return None
    seat = <object>value  # held here; the reference the call gave is let go
    Py_XDECREF(value)
    if type(seat) is not _Seat:
        return None
    cdef PyObject* p = _at(seat, SEAT_PROCESSOR)
    if p is NULL or <object>p is not processor:
        return None
    return seat


cdef inline object _named(object seat, Py_ssize_t offset, object name):
    """``seat``'s mapping at ``offset`` (a dict) looked up by ``name`` (a str: no Python
    code runs), or None."""
    cdef PyObject* p = _at(seat, offset)
    if p is NULL or type(<object>p) is not dict:
        return None
    return (<dict><object>p).get(name)


def processor_state(self, name):
    if type(name) is str:
        seat = _seat_for(self)
        if seat is not None:
            stores = _held(seat, SEAT_STORES, "stores")
            if stores is not None:
                now = getattr(stores, "now", None)
                if type(now) is dict:
                    handle = (<dict>now).get(name)
                    if handle is not None:
                        return handle
    return _py_state(self, name)


def processor_window(self, name):
    if type(name) is str:
        seat = _seat_for(self)
        if seat is not None:
            handle = _named(seat, SEAT_WINDOWS, name)
            if handle is not None:
                return handle
    return _py_window(self, name)


def processor_table(self, name):
    if type(name) is str:
        seat = _seat_for(self)
        if seat is not None:
            handle = _named(seat, SEAT_TABLES, name)
            if handle is not None:
                return handle
    return _py_table(self, name)


def bind_seat(seat_type, current, python):
    global _Seat, _CURRENT, _py_state, _py_window, _py_table
    global SEAT_PROCESSOR, SEAT_STORES, SEAT_WINDOWS, SEAT_TABLES
    offsets = (  # every one found before any is set
        _slot(seat_type, "processor"), _slot(seat_type, "stores"),
        _slot(seat_type, "windows"), _slot(seat_type, "tables"),
    )
    methods = (python["state"], python["window"], python["table"])
    SEAT_PROCESSOR, SEAT_STORES, SEAT_WINDOWS, SEAT_TABLES = offsets
    _py_state, _py_window, _py_table = methods
    _Seat, _CURRENT = seat_type, current
    return {"state": processor_state, "window": processor_window, "table": processor_table}


# --- a table's reads ---------------------------------------------------------------------
# ``TableStore.get`` (``eosflow._state._tables``): a store's read (``_through``) with the
# view's own slots; a view whose layers are not ``Layers`` takes the Python method.

cdef object _Table = None
cdef object _py_table_get = None
cdef Py_ssize_t T_LAYERS = -1, T_SLOT = -1, T_READ = -1, T_LOADS = -1


def table_get(self, key, default=None):
    if type(self) is not _Table or _Layers is None:
        return _py_table_get(self, key, default)
    layers = _held(self, T_LAYERS, "_layers")
    if type(layers) is not _Layers:
        return _py_table_get(self, key, default)
    raw = _through(
        layers, _held(self, T_SLOT, "_slot"), _held(self, T_READ, "_read"),
        key if _plain_key(key) else _store_key(key),
    )
    if raw is None:
        return default
    loads = _held(self, T_LOADS, "_loads")
    return raw if loads is None else loads(raw)


def bind_table(table_type, python_get):
    global _Table, _py_table_get, T_LAYERS, T_SLOT, T_READ, T_LOADS
    offsets = (  # every one found before any is set
        _slot(table_type, "_layers"), _slot(table_type, "_slot"),
        _slot(table_type, "_read"), _slot(table_type, "_loads"),
    )
    T_LAYERS, T_SLOT, T_READ, T_LOADS = offsets
    _py_table_get, _Table = python_get, table_type
    return table_get
