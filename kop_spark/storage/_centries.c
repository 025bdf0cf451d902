/*
 * The compiled twin of kop_spark.storage.ledger_entry's entry check: a run of ledger entries
 * verified in one call, as a Spark task reads them (see docs/ledger-format.md for the layout).
 *
 * Optional, as the record codec's twin is: ledger_entry falls back to its pure-Python reference
 * when this module is not built, and the tests check both accept and refuse the same entries. It
 * only says whether entries are good; where one is not, the reference names what is wrong.
 */
#include "../record/_native.h"

/* Broker entry metadata: magic u16, batch size i32, relative index i64, broker timestamp i64,
 * record count i32, CRC-32C u32; then the Kafka v2 batch, whose header is 61 bytes. */
#define METADATA_SIZE 30
#define METADATA_CRC_SPAN 26
#define ENTRY_MAGIC 0x4B45
#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define BATCH_PREFIX 21 /* the batch's bytes up to its attributes: under the metadata's CRC */

static uint32_t crc_table[256];

static void
crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1; /* CRC-32C, reflected */
        crc_table[i] = c;
    }
}

/* CRC-32C of a few bytes, continuing from `crc` (as crc32c.crc32c(data, crc)): a call into the
 * library costs more than the metadata's 47 bytes take here. */
static uint32_t
crc_small(const uint8_t *p, Py_ssize_t n, uint32_t crc)
{
    crc = ~crc;
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* Whether the entry at data[pos:] is whole and sound, where its table row gives it `relative`:
 * 1 if so (its batch's size in *size, its lastOffsetDelta in *last_delta), 0 if not, -1 on error. */
static int
entry_ok(const uint8_t *data, Py_ssize_t len, Py_ssize_t pos, long long relative, int32_t *size, int32_t *last_delta)
{
    if (pos < 0 || pos > len - METADATA_SIZE - HEADER_SIZE)
        return 0;
    const uint8_t *meta = data + pos, *batch = meta + METADATA_SIZE;
    int64_t batch_size = get_be(meta + 2, 4);
    if (get_be(meta, 2) != ENTRY_MAGIC || batch_size < HEADER_SIZE || batch_size > len - pos - METADATA_SIZE)
        return 0;
    if (batch[16] != 2 || get_be(batch + 8, 4) + LOG_OVERHEAD != batch_size)
        return 0; /* magic, batchLength */
    if (get_be(meta + 22, 4) != get_be(batch + 57, 4) || get_be(meta + 6, 8) != relative)
        return 0; /* the record counts agree, and the relative index is the table's */
    uint32_t crc = crc_small(batch, BATCH_PREFIX, crc_small(meta, METADATA_CRC_SPAN, 0));
    if (crc != (uint32_t)get_be(meta + METADATA_CRC_SPAN, 4))
        return 0;
    long long body = crc32c(batch + BATCH_PREFIX, batch_size - BATCH_PREFIX);
    if (body < 0)
        return -1;
    if ((uint32_t)body != (uint32_t)get_be(batch + 17, 4))
        return 0;
    *size = (int32_t)batch_size;
    *last_delta = (int32_t)get_be(batch + 23, 4);
    return 1;
}

PyDoc_STRVAR(verify_entries_doc,
"verify_entries(data, rows, start, spans) -> (good, end_index)\n\n"
"Verify the entries at the table rows' positions ((position, relative_index, ...) tuples), which\n"
"`data` holds from byte `start` of the file on: both checksums, the batch's framing, the record\n"
"counts, the relative index. Each good entry's batch goes into `spans` (a writable buffer of\n"
"2 int64s a row) as its position in `data` and its size. Returns how many rows, from the first,\n"
"are good, and the relative index after the last good one's records (0 if none).");

static PyObject *
verify_entries(PyObject *self, PyObject *args)
{
    Py_buffer data, spans;
    PyObject *rows;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "y*Onw*", &data, &rows, &start, &spans))
        return NULL;
    PyObject *result = NULL, *seq = PySequence_Fast(rows, "rows must be a sequence");
    if (seq == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), good = 0;
    if (spans.len < n * 16) {
        PyErr_Format(PyExc_ValueError, "spans: room for %zd rows, %zd given", spans.len / 16, n);
        goto done;
    }
    int64_t *out = spans.buf;
    long long end_index = 0;
    for (; good < n; good++) {
        PyObject *row = PySequence_Fast_GET_ITEM(seq, good);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) < 2) {
            PyErr_SetString(PyExc_TypeError, "rows: expected (position, relative_index, ...) tuples");
            goto done;
        }
        long long position = PyLong_AsLongLong(PyTuple_GET_ITEM(row, 0));
        long long relative = PyLong_AsLongLong(PyTuple_GET_ITEM(row, 1));
        if (PyErr_Occurred())
            goto done;
        int32_t size, last_delta;
        int ok = entry_ok(data.buf, data.len, (Py_ssize_t)(position - start), relative, &size, &last_delta);
        if (ok < 0)
            goto done;
        if (!ok)
            break;
        out[2 * good] = position - start + METADATA_SIZE;
        out[2 * good + 1] = size;
        end_index = relative + last_delta + 1;
    }
    result = Py_BuildValue("(nL)", good, end_index);
done:
    Py_XDECREF(seq);
    PyBuffer_Release(&data);
    PyBuffer_Release(&spans);
    return result;
}

static PyMethodDef methods[] = {
    {"verify_entries", verify_entries, METH_VARARGS, verify_entries_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kop_spark.storage._centries", "Compiled twin of the ledger entry check.", -1, methods,
};

PyMODINIT_FUNC
PyInit__centries(void)
{
    crc_table_init();
    if (crc32c_import() < 0)
        return NULL;
    return PyModule_Create(&module);
}
