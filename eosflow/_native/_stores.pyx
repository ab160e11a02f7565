# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The state's hot paths compiled (see the face): a store's point reads and writes, a
table view's read, and a processor's per-record lookups, each in place of the Python
method it is held to, with the slots of the objects it reads at their offsets (found by
``_hot.slot_offset`` when it is bound)."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong, PyLong_FromVoidPtr
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdio cimport snprintf
from libc.string cimport memcmp, memcpy
from ._slots cimport _at

from ._hot import slot_offset as _slot


cdef extern from "Python.h":
    int PyContextVar_Get(object var, PyObject* default_value, PyObject** value) except -1


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


cdef object _loads(object serde, object raw):
    """``serde.loads(raw)``, a JSON integer of at most 18 digits read in C."""
    if serde is _JSON and type(raw) is bytes:
        value = _json_int(<bytes>raw)
        if value is not None:
            return value
    return serde.loads(raw)


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
    return _loads(_held(self, S_SERDE, "_serde"), raw)


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
# processor -- or for a pipeline whose stage this processor is, the name among those
# the stage declares (the seat's ``reach``) -- holding the handle by name. Anything
# else -- no seat, another processor's, a stage's name it does not declare, a name not
# found, not a str -- takes the Python method, which does the same lookup first.

cdef object _Seat = None
cdef object _CURRENT = None
cdef object _py_state = None, _py_window = None, _py_table = None
cdef Py_ssize_t SEAT_PROCESSOR = -1, SEAT_STORES = -1, SEAT_WINDOWS = -1, SEAT_TABLES = -1
cdef Py_ssize_t SEAT_REACH = -1


cdef inline object _seat_for(object processor, object name):
    """The context's seat when it is of the class bound and made for ``processor``, or
    for the pipeline whose stage ``processor`` is and ``name`` (a str) is among the
    names that stage declares (``Seat.reach``: its id -> a frozenset)."""
    cdef PyObject* value = NULL
    PyContextVar_Get(_CURRENT, NULL, &value)
    if value is NULL:
        return None
    seat = <object>value  # held here; the reference the call gave is let go
    Py_XDECREF(value)
    if type(seat) is not _Seat:
        return None
    cdef PyObject* p = _at(seat, SEAT_PROCESSOR)
    if p is NULL:
        return None
    if <object>p is processor:
        return seat
    p = _at(seat, SEAT_REACH)  # a stage's: the names it declares
    if p is NULL or type(<object>p) is not dict:
        return None
    names = (<dict><object>p).get(PyLong_FromVoidPtr(<void*>processor))  # id(processor)
    if type(names) is not frozenset or name not in <frozenset>names:
        return None
    return seat


cdef inline object _named(object processor, Py_ssize_t offset, object name):
    """The handle ``name`` (a str: no Python code runs) in the dict at ``offset`` of the
    seat made for ``processor``, or None."""
    if type(name) is not str:
        return None
    seat = _seat_for(processor, name)
    if seat is None:
        return None
    cdef PyObject* p = _at(seat, offset)
    if p is NULL or type(<object>p) is not dict:
        return None
    return (<dict><object>p).get(name)


def processor_state(self, name):
    if type(name) is str:
        seat = _seat_for(self, name)
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
    handle = _named(self, SEAT_WINDOWS, name)
    return handle if handle is not None else _py_window(self, name)


def processor_table(self, name):
    handle = _named(self, SEAT_TABLES, name)
    return handle if handle is not None else _py_table(self, name)


def bind_seat(seat_type, current, python):
    global _Seat, _CURRENT, _py_state, _py_window, _py_table
    global SEAT_PROCESSOR, SEAT_STORES, SEAT_WINDOWS, SEAT_TABLES, SEAT_REACH
    offsets = (  # every one found before any is set
        _slot(seat_type, "processor"), _slot(seat_type, "stores"),
        _slot(seat_type, "windows"), _slot(seat_type, "tables"), _slot(seat_type, "reach"),
    )
    methods = (python["state"], python["window"], python["table"])
    SEAT_PROCESSOR, SEAT_STORES, SEAT_WINDOWS, SEAT_TABLES, SEAT_REACH = offsets
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


# --- a window's advance and a tumbling window's update -----------------------------------
# ``WindowStore.advance`` and ``update`` (``eosflow._state._windows``) on their hot paths
# only, outside an undoable unit and with the layers of the generation the handle read:
# ``advance`` takes the record's time and holds the stream time it moved for the
# deferred write; ``update``, for a tumbling window and the record's window the one the
# last update wrote (``_at``), holds the value (or reads it once) and then ``fn``'s
# answer. Every other case (a str key, a hopping window's update, a window change, a
# late record, a negative time, an undoable unit, a moved generation, any type not the
# one bound) takes the Python method, which then does all of it; none of those checks
# changes anything first.

cdef object _Window = None
cdef object _py_update = None
cdef Py_ssize_t WS_AT = -1, WS_AT_WINDOW = -1, WS_DATA = -1, WS_DEFERRED_IN = -1
cdef Py_ssize_t WS_EXACT = -1, WS_GENERATION = -1, WS_LAYERS = -1, WS_PREFIX = -1
cdef Py_ssize_t WS_SERDE = -1, WS_VALUES = -1, WS_CLOSED = -1, WS_TUMBLING = -1, WS_TIME = -1
cdef Py_ssize_t WS_LATE = -1, WS_NOW = -1, WS_EDGE = -1, WS_TIME_HELD = -1
cdef Py_ssize_t L_GENERATION = -1, L_DEFERRED = -1
cdef object _py_advance = None


cdef inline void _put(object o, Py_ssize_t offset, object value) noexcept:
    """The slot at ``offset`` set to ``value`` (held), what it held let go."""
    cdef PyObject** slot = <PyObject**>((<char*><PyObject*>o) + offset)
    cdef PyObject* old = slot[0]
    Py_INCREF(value)
    slot[0] = <PyObject*>value
    Py_XDECREF(old)


cdef inline bint _moved(object self, object layers):
    """Whether the handle must take the Python path: layers not the class bound, an
    undoable unit open, or a generation it has not read."""
    return (
        type(layers) is not _Layers
        or _held(layers, L_UNDO, "undo") is not None
        or _held(self, WS_GENERATION, "_generation") != _held(layers, L_GENERATION, "generation")
    )


cdef inline void _defer(object self, object layers) except *:
    """The handle registered for the layers' deferred writes, once per list."""
    deferred = _held(layers, L_DEFERRED, "deferred")
    if _held(self, WS_DEFERRED_IN, "_deferred_in") is not deferred:
        _put(self, WS_DEFERRED_IN, deferred)
        layers.defer(self)


def window_advance(self, t, offset=0):
    cdef long long ms, now, edge
    if type(self) is not _Window or _Layers is None or not _as_ms(t, &ms):
        return _py_advance(self, t, offset)
    layers = _held(self, WS_LAYERS, "_layers")
    if (
        _moved(self, layers)
        or not _as_ms(_held(self, WS_NOW, "_now"), &now)
        or not _as_ms(_held(self, WS_EDGE, "_edge"), &edge)
    ):
        return _py_advance(self, t, offset)
    _put(self, WS_TIME, t)
    _put(self, WS_LATE, False)
    before = _held(self, WS_CLOSED, "closed")
    if ms > now:
        _put(self, WS_NOW, t)
        _put(self, WS_TIME_HELD, True)
        _defer(self, layers)
        if ms >= edge:  # a window closes
            self._close_through(t)
    return before


cdef inline bint _as_ms(object value, long long* out):
    """``value`` as a C integer when it is an int in 64 bits (else False)."""
    cdef int overflow = 0
    if type(value) is not int:
        return False
    out[0] = PyLong_AsLongLongAndOverflow(value, &overflow)
    return not overflow


def window_update(self, key, fn, initial):
    cdef long long t, step, start, at, closed_ms
    cdef Py_ssize_t n
    if type(self) is not _Window or type(key) is not bytes or _Layers is None:
        return _py_update(self, key, fn, initial)
    if (
        not _as_ms(_held(self, WS_TUMBLING, "_tumbling"), &step) or step <= 0
        or not _as_ms(_held(self, WS_TIME, "time"), &t) or t < 0
    ):
        return _py_update(self, key, fn, initial)
    start = t - t % step  # t >= 0: C's remainder is Python's
    closed = _held(self, WS_CLOSED, "closed")
    if closed is not None and (not _as_ms(closed, &closed_ms) or start <= closed_ms):
        return _py_update(self, key, fn, initial)  # late: the Python method says so
    if not _as_ms(_held(self, WS_AT, "_at"), &at) or at != start:
        return _py_update(self, key, fn, initial)  # another window: its prefix is made there
    layers = _held(self, WS_LAYERS, "_layers")
    if _moved(self, layers):
        return _py_update(self, key, fn, initial)
    values = _held(self, WS_VALUES, "_values")
    prefix = _held(self, WS_PREFIX, "_prefix")
    exact = _held(self, WS_EXACT, "_exact")
    if type(values) is not dict or type(prefix) is not bytes or type(exact) is not frozenset:
        return _py_update(self, key, fn, initial)
    serde = _held(self, WS_SERDE, "_serde")
    data = _held(self, WS_DATA, "_data")
    n = PyBytes_GET_SIZE(prefix)  # prefix + key, without the buffer protocol's steps
    dk = PyBytes_FromStringAndSize(NULL, n + PyBytes_GET_SIZE(key))
    memcpy(PyBytes_AS_STRING(dk), PyBytes_AS_STRING(prefix), n)
    memcpy(PyBytes_AS_STRING(dk) + n, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
    value = (<dict>values).get(dk, _MISSING)
    if value is _MISSING:
        raw = data.raw(dk)
        value = initial if raw is None else _loads(serde, raw)
    value = fn(value)
    values = _held(self, WS_VALUES, "_values")  # again: an ``fn`` reading this window
    if type(value) in <frozenset>exact:         # wrote them out
        values[dk] = value
        _defer(self, layers)
    else:  # (a list, a tuple, ...): serialized now, first: one it cannot write changes nothing
        raw = serde.dumps(value)
        values.pop(dk, None)
        data.put_raw(dk, raw)
    return [(_held(self, WS_AT_WINDOW, "_at_window"), value)]


def bind_window(window_type, python):
    global _Window, _py_update, _py_advance, WS_AT, WS_AT_WINDOW, WS_DATA, WS_DEFERRED_IN
    global WS_EXACT, WS_GENERATION, WS_LAYERS, WS_PREFIX, WS_SERDE, WS_VALUES, WS_CLOSED
    global WS_TUMBLING, WS_TIME, WS_LATE, WS_NOW, WS_EDGE, WS_TIME_HELD, L_GENERATION, L_DEFERRED
    if _Layers is None:
        raise TypeError("bind_store first: the window's layers are a store's")
    offsets = tuple(  # every one found before any is set
        _slot(window_type, name)
        for name in (
            "_at", "_at_window", "_data", "_deferred_in", "_exact", "_generation",
            "_layers", "_prefix", "_serde", "_values", "closed", "_tumbling", "time",
            "late", "_now", "_edge", "_time_held",
        )
    ) + (_slot(_Layers, "generation"), _slot(_Layers, "deferred"))
    methods = (python["update"], python["advance"])
    (
        WS_AT, WS_AT_WINDOW, WS_DATA, WS_DEFERRED_IN, WS_EXACT, WS_GENERATION, WS_LAYERS,
        WS_PREFIX, WS_SERDE, WS_VALUES, WS_CLOSED, WS_TUMBLING, WS_TIME, WS_LATE, WS_NOW,
        WS_EDGE, WS_TIME_HELD, L_GENERATION, L_DEFERRED,
    ) = offsets
    _py_update, _py_advance = methods
    _Window = window_type
    return {"update": window_update, "advance": window_advance}


# --- the read cache's reads ---------------------------------------------------------------
# ``Reader.get`` (``eosflow._state._cache``): a store's read that the layers did not
# answer, through the read cache -- the newer generation's dict read in C; the older
# generation, a miss's load (RocksDB) and its keeping go through the cache's own
# methods, as the Python method's do. A reader or cache of another class than the ones
# bound takes the Python method.

cdef object _Reader = None, _ReadCache = None, _CACHE_MISSING = None, _py_reader_get = None
cdef Py_ssize_t R_CACHE = -1, R_LOAD = -1, R_TAG = -1, C_NEW = -1


def reader_get(self, key):
    if type(self) is not _Reader:
        return _py_reader_get(self, key)
    cache = _held(self, R_CACHE, "_cache")
    if type(cache) is not _ReadCache:
        return _py_reader_get(self, key)
    tag = _held(self, R_TAG, "tag")
    new = _held(cache, C_NEW, "_new")
    kept = (<dict>new).get(tag) if type(new) is dict else new.get(tag)
    if kept is not None:
        value = (<dict>kept).get(key, _CACHE_MISSING) if type(kept) is dict else kept.get(
            key, _CACHE_MISSING
        )
        if value is not _CACHE_MISSING:
            return value
    value = cache._older(tag, key)
    if value is _CACHE_MISSING:
        value = _held(self, R_LOAD, "load")(key)
        cache.keep(tag, key, value)
    return value


def bind_reader(reader_type, cache_type, missing, python_get):
    global _Reader, _ReadCache, _CACHE_MISSING, _py_reader_get, R_CACHE, R_LOAD, R_TAG, C_NEW
    offsets = (  # every one found before any is set
        _slot(reader_type, "_cache"), _slot(reader_type, "load"), _slot(reader_type, "tag"),
        _slot(cache_type, "_new"),
    )
    R_CACHE, R_LOAD, R_TAG, C_NEW = offsets
    _py_reader_get, _CACHE_MISSING = python_get, missing
    _Reader, _ReadCache = reader_type, cache_type
    return reader_get
