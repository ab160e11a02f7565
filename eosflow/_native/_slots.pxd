# cython: language_level=3
# An object's slot read at its offset (``_hot.slot_offset`` finds it: a ``__slots__``
# member's or a msgspec field's), shared by the compiled modules that cimport it: a
# ``cdef inline`` is shared through a .pxd only.

from cpython.ref cimport PyObject


cdef inline PyObject* _at(object o, Py_ssize_t offset) noexcept:
    """The slot's object, borrowed (NULL when unset)."""
    return (<PyObject**>((<char*><PyObject*>o) + offset))[0]
