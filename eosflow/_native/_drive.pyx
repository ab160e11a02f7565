# cython: language_level=3, boundscheck=False, wraparound=False
"""The engine's per-record loop compiled (see the face): ``_drive_py``'s ``drive`` and
``mark_runs`` step for step, a coroutine sent into from C (``PyIter_Send``: its return
comes back without a ``StopIteration``) and the fields of ``Output`` and ``Record`` read
at their slots' offsets."""

from cpython.ref cimport PyObject, Py_XDECREF
from ._slots cimport _at

from .._records import Output, Record
from ._drive_py import AWAIT, END, RAISED, RESULT, STOP, UNSTARTED, YIELD
from ._hot import slot_offset


cdef extern from "Python.h":
    ctypedef enum PySendResult:
        PYGEN_RETURN
        PYGEN_ERROR
        PYGEN_NEXT
    PySendResult PyIter_Send(object iter, object arg, PyObject** presult)
    bint PyCoro_CheckExact(object)
    bint PyBytes_CheckExact(PyObject*)
    PyObject* Py_None


cdef extern from "<time.h>" nogil:
    cdef struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int clk_id, timespec* tp)
    int CLOCK_MONOTONIC


cdef object _Output = Output
cdef object _Record = Record
cdef Py_ssize_t O_KEY = slot_offset(Output, "key")
cdef Py_ssize_t O_VALUE = slot_offset(Output, "value")
cdef Py_ssize_t R_TOPIC = slot_offset(Record, "topic")
cdef Py_ssize_t R_PARTITION = slot_offset(Record, "partition")
cdef Py_ssize_t R_OFFSET = slot_offset(Record, "offset")
cdef object _END = END, _STOP = STOP, _YIELD = YIELD, _RESULT = RESULT
cdef object _AWAIT = AWAIT, _RAISED = RAISED, _UNSTARTED = UNSTARTED


cdef inline bint _bytes_or_none(PyObject* p) noexcept:
    return p == Py_None or (p != NULL and PyBytes_CheckExact(p))


cdef inline double _monotonic() noexcept:
    """``time.monotonic()``: CPython reads CLOCK_MONOTONIC on Linux too."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef int _raised() except -1:
    """-1 with the exception ``PyIter_Send`` set: Cython raises it here."""
    return -1


def drive(list records not None, Py_ssize_t start, process, route, enter,
          list outputs not None, double deadline, ending, double yield_at):
    cdef Py_ssize_t i = start
    topic, part = None, None  # the run entered last in this call (``enter``)
    cdef PyObject* got
    cdef PySendResult sent
    cdef double now
    run = process  # what the run entered last takes its records through (``enter``)
    while i < len(records):
        if i:
            now = _monotonic()
            if now >= deadline or (ending is not None and ending.done()):
                return i, _STOP, None
            if now >= yield_at:
                return i, _YIELD, None
        try:
            r = records[i]
            if enter is not None:
                if type(r) is _Record:
                    t, p = <object>_at(r, R_TOPIC), <object>_at(r, R_PARTITION)
                else:
                    t, p = r.topic, r.partition
                if (p is not part and p != part) or (t is not topic and t != topic):
                    topic, part = t, p
                    run = enter((t, p))
                    if run is None:
                        run = process
            aw = run(r)
            if not PyCoro_CheckExact(aw):
                return i, _AWAIT, (aw, _UNSTARTED)
            got = NULL
            sent = PyIter_Send(aw, None, &got)
            if sent == PYGEN_ERROR:
                _raised()
            result = <object>got  # a new reference: the one PyIter_Send gave is let go
            Py_XDECREF(got)
            if sent == PYGEN_NEXT:
                return i, _AWAIT, (aw, result)
            if route is not None and type(result) is not _Output and result is not None:
                result = route(result)
        except BaseException as exc:  # the engine's policy: dead letter, stop, or re-raise
            return i, _RAISED, exc
        if result is not None:
            if type(result) is not _Output:
                return i, _RESULT, result
            if not (_bytes_or_none(_at(result, O_VALUE)) and _bytes_or_none(_at(result, O_KEY))):
                return i, _RESULT, result
            outputs.append(result)
        i += 1
    return i, _END, None


def mark_runs(list records not None, Py_ssize_t done, dict offsets not None):
    cdef Py_ssize_t i
    topic, part, last = "", -1, -1
    for i in range(min(done, len(records))):
        r = records[i]
        if type(r) is _Record:
            t, p = <object>_at(r, R_TOPIC), <object>_at(r, R_PARTITION)
        else:
            t, p = r.topic, r.partition
        if (p is not part and p != part) or (t is not topic and t != topic):
            if last >= 0:
                offsets[(topic, part)] = last + 1
            topic, part = t, p
        last = <object>_at(r, R_OFFSET) if type(r) is _Record else r.offset
    if last >= 0:
        offsets[(topic, part)] = last + 1
