/*
 * What the compiled twins share (kop_spark.record._crecords, kop_spark.storage._centries): CRC-32C
 * through the crc32c package, which the project depends on anyway and which uses the CPU's CRC
 * instructions, and big-endian reads of Kafka's and the ledger's fixed-width fields.
 */
#ifndef KOP_NATIVE_H
#define KOP_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *crc32c_function;

/* Look up crc32c.crc32c once, at module init: 0, or -1 with an exception set. */
static int
crc32c_import(void)
{
    PyObject *crc32c_module = PyImport_ImportModule("crc32c");
    if (crc32c_module == NULL)
        return -1;
    crc32c_function = PyObject_GetAttrString(crc32c_module, "crc32c");
    Py_DECREF(crc32c_module);
    return crc32c_function == NULL ? -1 : 0;
}

/* CRC-32C of n bytes at p, or -1 with an exception set. */
static long long
crc32c(const uint8_t *p, Py_ssize_t n)
{
    PyObject *view = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    if (view == NULL)
        return -1;
    PyObject *crc = PyObject_CallOneArg(crc32c_function, view);
    Py_DECREF(view);
    if (crc == NULL)
        return -1;
    long long value = PyLong_AsLongLong(crc);
    Py_DECREF(crc);
    return value;
}

/* A signed big-endian integer of 2, 4 or 8 bytes. */
static inline int64_t
get_be(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | p[i];
    return bytes == 8 ? (int64_t)v : bytes == 4 ? (int64_t)(int32_t)v : (int64_t)(int16_t)v;
}

#endif
