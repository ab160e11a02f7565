# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The hot paths compiled (see the face): ``_reference`` step for step, with the fields
of ``Output``, ``Record`` and the adapter's batch read at their slots' offsets, as
CPython's own specialised attribute reads do, instead of through ``getattr``."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdint cimport uint32_t

from .._records import Output, Record
from ._reference import Oversize


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    object PyObject_Vectorcall(object callable, PyObject** args, size_t nargsf, PyObject* kwnames)


cdef list _NO_HEADERS = []  # shared, never mutated


cdef Py_ssize_t _slot(object cls, str name) except -1:
    """The offset in an instance of ``cls`` of its slot ``name`` (a member descriptor:
    msgspec's fields and ``__slots__`` are)."""
    member = cls.__dict__[name]
    if type(member).__name__ != "member_descriptor":
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    return (<PyMemberDescrObject*><PyObject*>member).d_member.offset


cdef inline PyObject* _at(object o, Py_ssize_t offset):
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


def murmur2(bytes data not None):
    return _murmur2(data)


def bind_batch(batch_type):
    global _Batch, B_ADD, B_COUNT
    B_ADD = _slot(batch_type, "_add")
    B_COUNT = _slot(batch_type, "count")
    _Batch = batch_type


def fill(list outputs not None, Py_ssize_t start, dict open_ not None, dict lists not None,
         Py_ssize_t max_bytes):
    if _Batch is None:
        raise RuntimeError("fill before bind_batch")
    cdef Py_ssize_t i, n = len(outputs), at, parts
    cdef object o, topic, partition, key, batch, meta, headers, count
    cdef PyObject* slot
    cdef PyObject** count_slot
    cdef PyObject* args[5]
    cdef object run_topic = None, run_partition = None, run_batch = None  # the last output's
    cdef object hashed_topic = None  # the topic of the last partition-less output:
    cdef list listed = None          # its partitions,
    cdef list hashed = None          # and their batches met in this call, by index
    for i in range(start, n):
        o = outputs[i]
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
                hashed_topic, listed = topic, <list>found
                hashed = [None] * len(listed)
            parts = len(listed)
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
        count_slot = <PyObject**>((<char*><PyObject*>batch) + B_COUNT)
        if count_slot[0] is NULL or _at(batch, B_ADD) is NULL:
            return i
        count = <object>count_slot[0]
        args[0] = <PyObject*>count
        args[1] = _at(o, O_TIMESTAMP)
        args[2] = <PyObject*>key
        args[3] = _at(o, O_VALUE)
        args[4] = <PyObject*>headers
        if args[1] is NULL or args[3] is NULL:
            return i
        try:
            meta = PyObject_Vectorcall(<object>_at(batch, B_ADD), args, 5, NULL)
        except TypeError:
            return i
        if meta is None:
            return i
        count = count + 1
        Py_INCREF(count)
        slot = count_slot[0]
        count_slot[0] = <PyObject*>count
        Py_XDECREF(slot)
        if meta.size > max_bytes:
            raise Oversize(i, meta.size)
    return n


def byte_count(records):
    cdef Py_ssize_t size = 0
    cdef PyObject* slot
    for r in records:
        if type(r) is not _Record:
            size += len(r.value or b"") + len(r.key or b"")
            continue
        slot = _at(r, R_VALUE)
        if slot is not NULL and <object>slot is not None:
            size += PyBytes_GET_SIZE(<object>slot) if type(<object>slot) is bytes else len(<object>slot)
        slot = _at(r, R_KEY)
        if slot is not NULL and <object>slot is not None:
            size += PyBytes_GET_SIZE(<object>slot) if type(<object>slot) is bytes else len(<object>slot)
    return size
