# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The hot paths compiled (see the face): ``_reference`` step for step, with the fields
of ``Output``, ``Record`` and the adapter's batch read at their slots' offsets, as
CPython's own specialised attribute reads do, instead of through ``getattr``."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdint cimport uint32_t

from .._records import Output, Record
from ._reference import Oversize
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
