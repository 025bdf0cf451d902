/*
 * The compiled twin of kop_spark.record's hot loops: records of a v2 batch checked, or to Arrow column buffers,
 * or thinned to those compaction keeps, Arrow column buffers to records, and Kafka's murmur2 partitioner over a
 * column of keys.
 *
 * Optional: kop_spark/record/_codec.py falls back to the pure-Python reference implementations
 * when this module is not built, and the tests check both give identical results. Nothing here
 * knows about pyarrow: columns come in as (validity, offsets, data, offset) tuples of objects that
 * export the buffer protocol, and go out into bytearrays that Python wraps as Arrow buffers.
 */
#include "_native.h"
#include <stdarg.h>
#include <string.h>

static PyObject *CorruptRecordError;
static PyObject *InvalidRecordError;

/* ---- varints (ZigZag, as protobuf and Kafka's record format v2) ---- */

/* 0 on success, -1 if the varint runs past `size`, -2 if it is longer than 10 bytes. */
static inline int
read_varint(const uint8_t *buf, Py_ssize_t size, Py_ssize_t *pos, int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    for (;;) {
        if (*pos >= size)
            return -1;
        uint8_t b = buf[(*pos)++];
        result |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80)
            break;
        shift += 7;
        if (shift > 63)
            return -2;
    }
    *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
    return 0;
}

static inline Py_ssize_t
varint_size(int64_t value)
{
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *
write_varint(uint8_t *p, int64_t value)
{
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (v >= 0x80) {
        *p++ = (uint8_t)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* ---- growing bytearray columns ---- */

typedef struct {
    PyObject *ba;
    Py_ssize_t len; /* bytes written */
    Py_ssize_t cap; /* the bytearray's size while we write: len plus what is reserved */
    uint8_t *data;  /* the bytearray's bytes, looked up again only when it is resized */
} out_t;

static int
out_open(out_t *o, PyObject *ba)
{
    if (!PyByteArray_Check(ba)) {
        PyErr_SetString(PyExc_TypeError, "output columns must be bytearrays");
        return -1;
    }
    o->ba = ba;
    o->len = o->cap = PyByteArray_GET_SIZE(ba);
    o->data = (uint8_t *)PyByteArray_AS_STRING(ba);
    return 0;
}

/* What a builder holding `len` bytes grows to for `n` more: double, so that a column built over
 * many calls is copied a bounded number of times, not once per call. */
static inline Py_ssize_t
grown(Py_ssize_t len, Py_ssize_t n)
{
    return 2 * len + n + 64;
}

/* Bytes the bytearray holds without reallocating: CPython keeps a bytearray's spare room when it
 * shrinks by less than half, and out_close shrinks by setting the size, so the room a column grew
 * to in one call serves the next. */
static inline Py_ssize_t
out_room(PyObject *ba)
{
    PyByteArrayObject *b = (PyByteArrayObject *)ba;
    return b->ob_alloc > 0 ? b->ob_alloc - (b->ob_start - b->ob_bytes) - 1 : 0;
}

/* Room for `n` more bytes: the room the bytearray holds when it is enough (all of it, so that the
 * writes that follow need no resize), else doubled. out_close gives back what was not used. */
static inline uint8_t *
out_reserve(out_t *o, Py_ssize_t n)
{
    if (o->len + n > o->cap) {
        Py_ssize_t room = out_room(o->ba), want = o->len + n <= room ? room : grown(o->len, n);
        if (PyByteArray_Resize(o->ba, want) < 0)
            return NULL;
        o->cap = want;
        o->data = (uint8_t *)PyByteArray_AS_STRING(o->ba);
    }
    return o->data + o->len;
}

static inline int
out_put(out_t *o, const void *src, Py_ssize_t n)
{
    uint8_t *p = out_reserve(o, n);
    if (p == NULL)
        return -1;
    if (n)
        memcpy(p, src, n);
    o->len += n;
    return 0;
}

static inline int
out_int32(out_t *o, int32_t v)
{
    return out_put(o, &v, 4); /* Arrow buffers are little-endian, as the machines we build for */
}

static inline int
out_int64(out_t *o, int64_t v)
{
    return out_put(o, &v, 8);
}

static inline int
out_byte(out_t *o, uint8_t v)
{
    return out_put(o, &v, 1);
}

/* A bytearray's size set to `len` (no more than it holds) in place, as CPython's own shrink does
 * when it keeps the room: PyByteArray_Resize gives the room back to the allocator when more than half
 * of it would be unused, as it is after a doubling or a builder's reserve_columns. */
static int
set_size(PyObject *ba, Py_ssize_t len)
{
    if (((PyByteArrayObject *)ba)->ob_exports > 0) /* refused as before: a view holds the buffer */
        return PyByteArray_Resize(ba, len);
    Py_SET_SIZE(ba, len);
    PyByteArray_AS_STRING(ba)[len] = '\0';
    return 0;
}

/* The column's size is what was written. */
static int
out_close(out_t *o)
{
    if (o->ba == NULL || o->cap == o->len)
        return 0;
    o->cap = o->len;
    return set_size(o->ba, o->len);
}

/* A variable-length column: data, int32 end offsets, a validity byte per row. */
typedef struct {
    out_t data, ends, valid;
} binary_out_t;

static int
binary_open(binary_out_t *c, PyObject *data, PyObject *ends, PyObject *valid)
{
    return (out_open(&c->data, data) < 0 || out_open(&c->ends, ends) < 0 || out_open(&c->valid, valid) < 0) ? -1 : 0;
}

static inline int
binary_put(binary_out_t *c, const uint8_t *src, int64_t length)
{
    if (length < 0) {
        if (out_byte(&c->valid, 0) < 0)
            return -1;
    }
    else if (out_put(&c->data, src, (Py_ssize_t)length) < 0 || out_byte(&c->valid, 1) < 0) {
        return -1;
    }
    if (c->data.len >= ((Py_ssize_t)1 << 31)) {
        PyErr_SetString(PyExc_OverflowError, "an Arrow batch column exceeds 2 GiB; flush more often");
        return -1;
    }
    return out_int32(&c->ends, (int32_t)c->data.len);
}

static int
binary_reserve(binary_out_t *c, Py_ssize_t rows, Py_ssize_t bytes)
{
    return (out_reserve(&c->data, bytes) == NULL || out_reserve(&c->ends, rows * 4) == NULL ||
            out_reserve(&c->valid, rows) == NULL) ? -1 : 0;
}

static int
binary_close(binary_out_t *c)
{
    return (out_close(&c->data) < 0 || out_close(&c->ends) < 0 || out_close(&c->valid) < 0) ? -1 : 0;
}

/* ---- decode ---- */

static int
corrupt(const char *format, ...)
{
    va_list va;
    va_start(va, format);
    PyErr_FormatV(CorruptRecordError, format, va);
    va_end(va);
    return -1;
}

static int
varint_or_raise(const uint8_t *buf, Py_ssize_t size, Py_ssize_t *pos, int64_t *out, long long base_offset)
{
    int rc = read_varint(buf, size, pos, out);
    if (rc == -2)
        return corrupt("varint longer than 10 bytes in the batch at offset %lld", base_offset);
    if (rc == -1)
        return corrupt("record batch at offset %lld ends inside a record", base_offset);
    return 0;
}

/* The record at *pos: its length, checked against the batch's end `size`; *pos moves past the
 * length and the record's attributes byte (unused by Kafka), *record_end to the record's end. */
static int
read_record_start(const uint8_t *buf, Py_ssize_t size, Py_ssize_t *pos, Py_ssize_t *record_end, long long base_offset)
{
    int64_t length = 0;
    if (varint_or_raise(buf, size, pos, &length, base_offset) < 0)
        return -1;
    *record_end = *pos + length;
    if (length < 0 || *record_end > size)
        return corrupt("record of %lld bytes overruns its batch at offset %lld", (long long)length, base_offset);
    (*pos)++;
    return 0;
}

/* A record's headers: their count at *pos, then each header's key and value, every length checked
 * against the record ending at `end` (a value length of -1 is a null value). */
typedef struct {
    Py_ssize_t key_at, value_at;
    int64_t key_length, value_length;
} header_t;

static int
read_header_count(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t *n, long long offset,
                  long long base_offset)
{
    if (varint_or_raise(buf, end, pos, n, base_offset) < 0)
        return -1;
    return *n < 0 ? corrupt("record at offset %lld has a negative header count", offset) : 0;
}

static int
read_header(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, header_t *h, long long offset, long long base_offset)
{
    if (varint_or_raise(buf, end, pos, &h->key_length, base_offset) < 0)
        return -1;
    if (h->key_length < 0)
        return corrupt("record at offset %lld has a header with a null key", offset);
    if (*pos + h->key_length > end)
        return corrupt("record at offset %lld overruns its length", offset);
    h->key_at = *pos;
    *pos += h->key_length;
    if (varint_or_raise(buf, end, pos, &h->value_length, base_offset) < 0)
        return -1;
    if (*pos + (h->value_length > 0 ? h->value_length : 0) > end)
        return corrupt("record at offset %lld overruns its length", offset);
    h->value_at = *pos;
    *pos += h->value_length > 0 ? h->value_length : 0;
    return 0;
}

#define BATCH_HEADER 61 /* a v2 batch's header, up to its records */
#define ATTR_COMPRESSION 0x07 /* a batch's attribute bits, as default_record_batch names them */
#define ATTR_LOG_APPEND_TIME 0x08
#define ATTR_CONTROL 0x20

/* The builder's 16 bytearray columns (see ArrowRecordBuilder), open for appending. */
typedef struct {
    out_t offsets, timestamps, timestamp_types, header_ends;
    binary_out_t keys, values, hkeys, hvalues;
    int32_t header_total; /* the last header list end: where the next record's headers start */
} columns_t;

static int
columns_open(columns_t *o, PyObject *columns, int include_headers)
{
    memset(o, 0, sizeof(*o));
    if (!PyTuple_Check(columns) || PyTuple_GET_SIZE(columns) != 16) {
        PyErr_SetString(PyExc_TypeError, "expected 16 output columns");
        return -1;
    }
    PyObject **c = &PyTuple_GET_ITEM(columns, 0);
    if (out_open(&o->offsets, c[0]) < 0 || out_open(&o->timestamps, c[1]) < 0 ||
        out_open(&o->timestamp_types, c[2]) < 0 || binary_open(&o->keys, c[3], c[4], c[5]) < 0 ||
        binary_open(&o->values, c[6], c[7], c[8]) < 0 || out_open(&o->header_ends, c[9]) < 0 ||
        binary_open(&o->hkeys, c[10], c[11], c[12]) < 0 || binary_open(&o->hvalues, c[13], c[14], c[15]) < 0)
        return -1;
    if (include_headers && o->header_ends.len >= 4)
        memcpy(&o->header_total, o->header_ends.data + o->header_ends.len - 4, 4);
    return 0;
}

/* Give back what was reserved; on failure the builder is discarded with the exception. */
static int
columns_close(columns_t *o)
{
    return (out_close(&o->offsets) == 0 && out_close(&o->timestamps) == 0 && out_close(&o->timestamp_types) == 0 &&
            binary_close(&o->keys) == 0 && binary_close(&o->values) == 0 && out_close(&o->header_ends) == 0 &&
            binary_close(&o->hkeys) == 0 && binary_close(&o->hvalues) == 0) ? 0 : -1;
}

/* Append the records of an uncompressed records section (`size` bytes at `buf`) whose offsets lie
 * in [start, end); log_append says the batch is LogAppendTime, stamped log_append_ts. */
static int
decode_payload(columns_t *o, const uint8_t *buf, Py_ssize_t size, Py_ssize_t count, long long base_offset,
               long long base_ts, int log_append, long long log_append_ts, long long start, long long end,
               int include_headers)
{
    Py_ssize_t pos = 0;
    /* Every record takes two bytes at least, every header two: bounds for the whole batch. */
    Py_ssize_t rows = count < size / 2 + 1 ? count : size / 2 + 1, headers = include_headers ? size / 2 + 1 : 0;
    if (out_reserve(&o->offsets, rows * 8) == NULL || out_reserve(&o->timestamps, rows * 8) == NULL ||
        out_reserve(&o->timestamp_types, rows * 4) == NULL || binary_reserve(&o->keys, rows, 0) < 0 ||
        binary_reserve(&o->values, rows, 0) < 0 || out_reserve(&o->header_ends, include_headers ? rows * 4 : 0) == NULL ||
        binary_reserve(&o->hkeys, headers, 0) < 0 || binary_reserve(&o->hvalues, headers, 0) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t ts_delta = 0, offset_delta = 0, key_length = 0, value_length = 0;
        Py_ssize_t record_end = 0;
        if (read_record_start(buf, size, &pos, &record_end, base_offset) < 0)
            return -1;
        /* Bounded by the record, even one outside [start, end) that is skipped: a record whose
         * fields overrun its length is corrupt wherever it lies, as the reference finds it. */
        if (varint_or_raise(buf, record_end, &pos, &ts_delta, base_offset) < 0 ||
            varint_or_raise(buf, record_end, &pos, &offset_delta, base_offset) < 0 ||
            varint_or_raise(buf, record_end, &pos, &key_length, base_offset) < 0)
            return -1;
        long long offset = base_offset + offset_delta;
        if (offset < start || offset >= end) {
            pos = record_end;
            continue;
        }
        Py_ssize_t key_at = pos;
        pos += key_length > 0 ? key_length : 0;
        if (pos > record_end || varint_or_raise(buf, record_end, &pos, &value_length, base_offset) < 0) {
            if (!PyErr_Occurred())
                corrupt("record at offset %lld overruns its length", offset);
            return -1;
        }
        Py_ssize_t value_at = pos;
        pos += value_length > 0 ? value_length : 0;
        if (pos > record_end)
            return corrupt("record at offset %lld overruns its length", offset);
        if (binary_put(&o->keys, buf + key_at, key_length) < 0 ||
            binary_put(&o->values, buf + value_at, value_length) < 0 || out_int64(&o->offsets, offset) < 0 ||
            out_int64(&o->timestamps, (log_append ? log_append_ts : base_ts + ts_delta) * 1000) < 0 ||
            out_int32(&o->timestamp_types, log_append) < 0)
            return -1;
        if (include_headers) {
            int64_t n = 0;
            if (read_header_count(buf, record_end, &pos, &n, offset, base_offset) < 0)
                return -1;
            for (int64_t h = 0; h < n; h++) {
                header_t hd = {0}; /* zeroed: the compiler cannot see that read_header sets it */
                if (read_header(buf, record_end, &pos, &hd, offset, base_offset) < 0 ||
                    binary_put(&o->hkeys, buf + hd.key_at, hd.key_length) < 0 ||
                    binary_put(&o->hvalues, buf + hd.value_at, hd.value_length) < 0)
                    return -1;
            }
            o->header_total += (int32_t)n;
            if (out_int32(&o->header_ends, o->header_total) < 0)
                return -1;
            if (pos != record_end)
                return corrupt("record at offset %lld does not match its length", offset);
        }
        pos = record_end;
    }
    return 0;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(payload, count, base_offset, base_ts, log_append_ts, start, end, include_headers, columns)\n\n"
"Append the records of an uncompressed records section whose offsets lie in [start, end) to the\n"
"builder's bytearray columns. log_append_ts is None for CreateTime batches.");

static PyObject *
decode_records(PyObject *self, PyObject *args)
{
    Py_buffer payload;
    Py_ssize_t count;
    long long base_offset, base_ts, start, end;
    PyObject *log_append_obj, *columns;
    int include_headers;
    if (!PyArg_ParseTuple(args, "y*nLLOLLpO", &payload, &count, &base_offset, &base_ts, &log_append_obj, &start,
                          &end, &include_headers, &columns))
        return NULL;
    int log_append = log_append_obj != Py_None;
    long long log_append_ts = log_append ? PyLong_AsLongLong(log_append_obj) : 0;
    columns_t o = {0};
    int failed = PyErr_Occurred() != NULL || columns_open(&o, columns, include_headers) < 0 ||
                 decode_payload(&o, payload.buf, payload.len, count, base_offset, base_ts, log_append, log_append_ts,
                                start, end, include_headers) < 0;
    PyBuffer_Release(&payload);
    if (columns_close(&o) < 0 || failed)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(decode_batches_doc,
"decode_batches(data, spans, first, offset_base, start, end, include_headers, max_rows, max_bytes, columns)\n\n"
"Append the records of the framed batches at spans[first:] (int64 pairs: position in data, size)\n"
"whose offsets (offset_base + the batch's baseOffset + delta) lie in [start, end), skipping control\n"
"batches, until the columns hold max_rows records or max_bytes of keys, values and header values.\n"
"Stops before a compressed batch. Returns the index of the first span not taken.");

static PyObject *
decode_batches(PyObject *self, PyObject *args)
{
    Py_buffer data, spans;
    Py_ssize_t first, max_rows, max_bytes;
    long long offset_base, start, end;
    int include_headers;
    PyObject *columns;
    if (!PyArg_ParseTuple(args, "y*y*nLLLpnnO", &data, &spans, &first, &offset_base, &start, &end, &include_headers,
                          &max_rows, &max_bytes, &columns))
        return NULL;
    const int64_t *span = spans.buf;
    Py_ssize_t n = spans.len / 16, i = first < 0 ? 0 : first;
    columns_t o = {0};
    int failed = columns_open(&o, columns, include_headers) < 0;
    for (; i < n && !failed; i++) {
        if (o.offsets.len / 8 >= max_rows || o.keys.data.len + o.values.data.len + o.hvalues.data.len >= max_bytes)
            break;
        int64_t at = span[2 * i], size = span[2 * i + 1];
        if (at < 0 || size < BATCH_HEADER || at + size > data.len) {
            failed = corrupt("batch %zd of %zd bytes at %lld lies outside the %zd bytes read", i, (Py_ssize_t)size,
                             (long long)at, data.len);
            break;
        }
        const uint8_t *b = (const uint8_t *)data.buf + at;
        long long base_offset = offset_base + get_be(b, 8);
        if (b[16] != 2 || get_be(b + 8, 4) + 12 != size) {
            failed = corrupt("batch at offset %lld is not one framed magic-2 batch of %lld bytes", base_offset,
                             (long long)size);
            break;
        }
        int attributes = (int)get_be(b + 21, 2);
        if (attributes & ATTR_CONTROL || base_offset + get_be(b + 23, 4) < start || base_offset >= end)
            continue; /* a control batch holds no data */
        if (attributes & ATTR_COMPRESSION)
            break; /* compressed: the caller decompresses it */
        int log_append = (attributes & ATTR_LOG_APPEND_TIME) != 0;
        failed = decode_payload(&o, b + BATCH_HEADER, size - BATCH_HEADER, (Py_ssize_t)get_be(b + 57, 4), base_offset,
                                get_be(b + 27, 8), log_append, get_be(b + 35, 8), start, end, include_headers) < 0;
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&spans);
    if (columns_close(&o) < 0 || failed)
        return NULL;
    return PyLong_FromSsize_t(i);
}

/* ---- check ---- */

/* Skip a record's headers at *pos, each checked to lie inside the record ending at `end`. */
static int
skip_headers(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, long long offset, long long base_offset)
{
    int64_t n = 0;
    if (read_header_count(buf, end, pos, &n, offset, base_offset) < 0)
        return -1;
    for (int64_t h = 0; h < n; h++) {
        header_t hd = {0}; /* zeroed: the compiler cannot see that read_header sets it */
        if (read_header(buf, end, pos, &hd, offset, base_offset) < 0)
            return -1;
        /* Header keys are strings to Kafka and to our readers: one that is not UTF-8 would make
         * the partition unreadable where it is read as Arrow. */
        PyObject *key = PyUnicode_DecodeUTF8((const char *)buf + hd.key_at, hd.key_length, NULL);
        if (key == NULL) {
            PyErr_Clear();
            PyErr_Format(InvalidRecordError, "record at offset %lld has a header key that is not UTF-8", offset);
            return -1;
        }
        Py_DECREF(key);
    }
    return 0;
}

PyDoc_STRVAR(check_records_doc,
"check_records(payload, count, base_offset, base_ts)\n\n"
"Walk every record of an uncompressed records section, its framing, keys, values, headers and\n"
"UTF-8 header keys checked as a broker checks a produce, copying nothing: (offset deltas are 0..count-1 in order,\n"
"the records' min timestamp (of those that have one) or -1, their max timestamp or -1, records without a key).");

static PyObject *
check_records(PyObject *self, PyObject *args)
{
    Py_buffer payload;
    Py_ssize_t count;
    long long base_offset, base_ts;
    if (!PyArg_ParseTuple(args, "y*nLL", &payload, &count, &base_offset, &base_ts))
        return NULL;
    const uint8_t *buf = payload.buf;
    Py_ssize_t size = payload.len, pos = 0, keyless = 0;
    int in_order = 1, failed = 0;
    int64_t max_ts_delta = INT64_MIN, min_ts_delta = INT64_MAX;
    for (Py_ssize_t i = 0; i < count && !failed; i++) {
        int64_t ts_delta = 0, offset_delta = 0, key_length = 0, value_length = 0;
        Py_ssize_t record_end = 0;
        failed = -1;
        if (read_record_start(buf, size, &pos, &record_end, base_offset) < 0)
            break;
        if (varint_or_raise(buf, record_end, &pos, &ts_delta, base_offset) < 0 ||
            varint_or_raise(buf, record_end, &pos, &offset_delta, base_offset) < 0 ||
            varint_or_raise(buf, record_end, &pos, &key_length, base_offset) < 0)
            break;
        long long offset = base_offset + offset_delta;
        pos += key_length > 0 ? key_length : 0;
        if (pos > record_end || varint_or_raise(buf, record_end, &pos, &value_length, base_offset) < 0) {
            if (!PyErr_Occurred())
                corrupt("record at offset %lld overruns its length", offset);
            break;
        }
        pos += value_length > 0 ? value_length : 0;
        if (pos > record_end) {
            corrupt("record at offset %lld overruns its length", offset);
            break;
        }
        if (skip_headers(buf, record_end, &pos, offset, base_offset) < 0)
            break;
        if (pos != record_end) {
            corrupt("record at offset %lld does not match its length", offset);
            break;
        }
        in_order &= offset_delta == i;
        keyless += key_length < 0;
        if (ts_delta > max_ts_delta)
            max_ts_delta = ts_delta;
        /* -1 is Kafka's "no timestamp", which the broker's timestamp checks pass over */
        if (ts_delta < min_ts_delta && base_ts + ts_delta != -1)
            min_ts_delta = ts_delta;
        failed = 0;
    }
    if (!failed && pos != size)
        failed = corrupt("record batch at offset %lld has %lld bytes after its %lld records", base_offset,
                         (long long)(size - pos), (long long)count);
    PyBuffer_Release(&payload);
    if (failed)
        return NULL;
    long long top = max_ts_delta == INT64_MIN ? -1 : base_ts + max_ts_delta;
    long long bottom = min_ts_delta == INT64_MAX ? -1 : base_ts + min_ts_delta;
    return Py_BuildValue("(NLLn)", PyBool_FromLong(in_order), bottom, top, keyless);
}

/* ---- thin (what compaction keeps of a batch) ---- */

static int
offset_in(const int64_t *sorted, Py_ssize_t n, int64_t offset)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && sorted[lo] == offset;
}

PyDoc_STRVAR(keep_records_doc,
"keep_records(payload, count, base_offset, base_ts, kept) -> (records, kept_count, max_timestamp)\n\n"
"The records of an uncompressed records section whose offsets are in kept (sorted int64s), their\n"
"bytes as they are; the largest of their timestamps (-1 if none). Each record's length, timestamp\n"
"and offset deltas are checked to lie inside the section and the record.");

static PyObject *
keep_records(PyObject *self, PyObject *args)
{
    Py_buffer payload, kept;
    Py_ssize_t count;
    long long base_offset, base_ts;
    if (!PyArg_ParseTuple(args, "y*nLLy*", &payload, &count, &base_offset, &base_ts, &kept))
        return NULL;
    const uint8_t *buf = payload.buf;
    const int64_t *wanted = kept.buf;
    Py_ssize_t size = payload.len, n_wanted = kept.len / 8, pos = 0, written = 0, n = 0;
    int64_t max_ts = -1;
    int failed = 0;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size); /* what is kept is at most all of it */
    uint8_t *o = out == NULL ? NULL : (uint8_t *)PyBytes_AS_STRING(out);
    failed = out == NULL;
    for (Py_ssize_t i = 0; i < count && !failed; i++) {
        Py_ssize_t start = pos, record_end = 0;
        int64_t ts_delta = 0, offset_delta = 0;
        failed = -1;
        if (read_record_start(buf, size, &pos, &record_end, base_offset) < 0 ||
            varint_or_raise(buf, record_end, &pos, &ts_delta, base_offset) < 0 ||
            varint_or_raise(buf, record_end, &pos, &offset_delta, base_offset) < 0)
            break;
        if (offset_in(wanted, n_wanted, base_offset + offset_delta)) {
            memcpy(o + written, buf + start, record_end - start);
            written += record_end - start;
            n++;
            if (base_ts + ts_delta > max_ts)
                max_ts = base_ts + ts_delta;
        }
        pos = record_end;
        failed = 0;
    }
    if (!failed && pos != size)
        failed = corrupt("record batch at offset %lld has %lld bytes after its %lld records", base_offset,
                         (long long)(size - pos), (long long)count);
    PyBuffer_Release(&payload);
    PyBuffer_Release(&kept);
    if (failed) {
        Py_XDECREF(out);
        return NULL;
    }
    if (_PyBytes_Resize(&out, written) < 0)
        return NULL;
    return Py_BuildValue("(NnL)", out, n, (long long)max_ts);
}

/* ---- Arrow columns in ---- */

/* A binary/string column given as (validity or None, int32 offsets, data, array offset). */
typedef struct {
    Py_buffer validity, offsets, data;
    int has_validity, present;
    Py_ssize_t offset, n_ends;
} binary_in_t;

static void
binary_in_release(binary_in_t *c)
{
    if (!c->present)
        return;
    if (c->has_validity)
        PyBuffer_Release(&c->validity);
    PyBuffer_Release(&c->offsets);
    PyBuffer_Release(&c->data);
    c->present = 0;
}

static int
binary_in_open(binary_in_t *c, PyObject *spec, const char *what)
{
    memset(c, 0, sizeof(*c));
    if (spec == Py_None)
        return 0;
    PyObject *validity, *offsets, *data;
    if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "OOOn", &validity, &offsets, &data, &c->offset)) {
        PyErr_Format(PyExc_TypeError, "%s: expected (validity, offsets, data, offset)", what);
        return -1;
    }
    c->has_validity = validity != Py_None;
    if (c->has_validity && PyObject_GetBuffer(validity, &c->validity, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(offsets, &c->offsets, PyBUF_SIMPLE) < 0) {
        if (c->has_validity)
            PyBuffer_Release(&c->validity);
        return -1;
    }
    if (PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0) {
        if (c->has_validity)
            PyBuffer_Release(&c->validity);
        PyBuffer_Release(&c->offsets);
        return -1;
    }
    c->present = 1;
    c->n_ends = c->offsets.len / 4;
    return 0;
}

static inline int
bit_set(const Py_buffer *b, Py_ssize_t i)
{
    return (((const uint8_t *)b->buf)[i >> 3] >> (i & 7)) & 1;
}

#define INVALID_ROW (-2)

/* Row `i` of the column: its bytes and length, -1 for null (and for an absent column), or
 * INVALID_ROW when the buffers do not hold that row. Each access is checked, so a call costs
 * the rows it reads, not the column's length. */
static inline int64_t
binary_in_get(const binary_in_t *c, Py_ssize_t i, const uint8_t **at)
{
    if (!c->present)
        return -1;
    Py_ssize_t j = c->offset + i;
    if (i < 0 || j + 1 >= c->n_ends || (c->has_validity && (j >> 3) >= c->validity.len))
        return INVALID_ROW;
    if (c->has_validity && !bit_set(&c->validity, j))
        return -1;
    const int32_t *ends = c->offsets.buf;
    if (ends[j] < 0 || ends[j] > ends[j + 1] || ends[j + 1] > c->data.len)
        return INVALID_ROW;
    *at = (const uint8_t *)c->data.buf + ends[j];
    return ends[j + 1] - ends[j];
}

static int
invalid_row(const char *what, Py_ssize_t row)
{
    PyErr_Format(PyExc_ValueError, "%s: row %zd is not in the column's buffers", what, row);
    return -1;
}

/* ---- encode ---- */

PyDoc_STRVAR(encode_records_doc,
"encode_records(keys, values, timestamps, headers, rows, partitions, num_partitions, count, max_bytes, now_ms,\n"
"               seal, into) -> [[(start, end, count, first_ts, max_ts)] per partition]\n\n"
"Encode `count` rows as the records sections of batches, each partition's closed after the record\n"
"that brings it to max_bytes. keys/values: binary column tuples or None; timestamps: (validity,\n"
"int64 values, offset, units per ms) or None, a null meaning now_ms; headers: (validity, int32 list\n"
"offsets, offset, key column, value column) or None; rows: None for rows 0..count-1, else a buffer\n"
"of uint64 row numbers; partitions: None (num_partitions 1) or an int32 partition per row.\n"
"With seal, each records section comes framed as a whole uncompressed batch (header and CRC),\n"
"as seal_record_batch frames it by default. into: a bytearray per partition, whose contents are\n"
"replaced by that partition's sections, one after another, each at into[p][start:end]. It\n"
"keeps its room for the next call; BufferError if a view of it is still held.");


static inline uint8_t *
put_be(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

/* The v2 header of an uncompressed CreateTime batch with no producer, as seal_record_batch writes it. */
static int
write_batch_header(uint8_t *b, Py_ssize_t size, Py_ssize_t count, long long first_ts, long long max_ts)
{
    uint8_t *p = put_be(b, 0, 8);              /* baseOffset */
    p = put_be(p, (uint64_t)(size - 12), 4);   /* batchLength */
    p = put_be(p, (uint64_t)-1, 4);            /* partitionLeaderEpoch */
    *p++ = 2;                                  /* magic */
    uint8_t *crc_at = p;
    p = put_be(p, 0, 4);                       /* crc, below */
    p = put_be(p, 0, 2);                       /* attributes */
    p = put_be(p, (uint64_t)(count - 1), 4);   /* lastOffsetDelta */
    p = put_be(p, (uint64_t)first_ts, 8);
    p = put_be(p, (uint64_t)max_ts, 8);
    p = put_be(p, (uint64_t)-1, 8);            /* producerId */
    p = put_be(p, (uint64_t)-1, 2);            /* producerEpoch */
    p = put_be(p, (uint64_t)-1, 4);            /* baseSequence */
    put_be(p, (uint64_t)count, 4);
    long long crc = crc32c(b + 21, size - 21);
    if (crc < 0)
        return -1;
    put_be(crc_at, (uint64_t)crc, 4);
    return 0;
}

/* Spark's and Java's Math.floorDiv: microseconds before 1970 round down to their millisecond. */
static inline long long
floor_div(long long v, long long d)
{
    long long q = v / d;
    return (v % d != 0 && (v < 0) != (d < 0)) ? q - 1 : q;
}

/* An optional fixed-width column: (validity or None, values, offset). */
typedef struct {
    Py_buffer validity, values;
    int has_validity, present;
    Py_ssize_t offset, width;
} fixed_in_t;

static int
fixed_in_open(fixed_in_t *c, PyObject *validity, PyObject *values, Py_ssize_t offset, Py_ssize_t width)
{
    memset(c, 0, sizeof(*c));
    c->width = width;
    c->offset = offset;
    if (PyObject_GetBuffer(values, &c->values, PyBUF_SIMPLE) < 0)
        return -1;
    if (validity != Py_None) {
        if (PyObject_GetBuffer(validity, &c->validity, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&c->values);
            return -1;
        }
        c->has_validity = 1;
    }
    c->present = 1;
    return 0;
}

static void
fixed_in_release(fixed_in_t *c)
{
    if (!c->present)
        return;
    PyBuffer_Release(&c->values);
    if (c->has_validity)
        PyBuffer_Release(&c->validity);
    c->present = 0;
}

/* 1 if row `i` is there and not null, 0 if null or the column is absent, -1 if the buffers do
 * not hold the row. `extra` more values must follow it (a list's end offset). */
static inline int
fixed_in_valid(const fixed_in_t *c, Py_ssize_t i, Py_ssize_t extra)
{
    if (!c->present)
        return 0;
    Py_ssize_t j = c->offset + i;
    if (i < 0 || (j + 1 + extra) * c->width > c->values.len || (c->has_validity && (j >> 3) >= c->validity.len))
        return -1;
    return c->has_validity ? bit_set(&c->validity, j) : 1;
}

/* A partition's batch being encoded: at out[start:], after that partition's earlier batches. */
typedef struct {
    out_t out;
    Py_ssize_t start, records;
    long long first_ts, max_ts;
} open_batch_t;

/* Frame the batch (with seal), append (start, end, records, first_ts, max_ts) to `chunks`, and
 * start afresh. */
static int
close_batch(open_batch_t *b, PyObject *chunks, int seal)
{
    if (seal &&
        write_batch_header(b->out.data + b->start, b->out.len - b->start, b->records, b->first_ts, b->max_ts) < 0)
        return -1;
    PyObject *chunk = Py_BuildValue("(nnnLL)", b->start, b->out.len, b->records, b->first_ts, b->max_ts);
    int failed = chunk == NULL || PyList_Append(chunks, chunk) < 0;
    Py_XDECREF(chunk);
    b->records = 0;
    return failed ? -1 : 0;
}

/* Each partition's bytearray, emptied with its room kept. A caller that copies each call's batches
 * out before the next (the sink) reuses the same memory for every call, as Kafka's producer pools
 * its batch buffers: with a new buffer per batch, glibc gave the freed heap top back to the system
 * and the next call faulted it in again, up to a fifth of kop's CPU in a Spark task's profile. */
static int
open_batches(open_batch_t *batches, PyObject *into, int n)
{
    if (!PyList_Check(into) || PyList_GET_SIZE(into) != n) {
        PyErr_Format(PyExc_TypeError, "into: expected a list of %d bytearrays", n);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        PyObject *ba = PyList_GET_ITEM(into, k);
        if (out_open(&batches[k].out, ba) < 0)
            return -1;
        if (((PyByteArrayObject *)ba)->ob_exports > 0) {
            PyErr_Format(PyExc_BufferError, "into[%d]: a view of the batches it held is still in use", k);
            return -1;
        }
        batches[k].out.len = 0;
    }
    return 0;
}

static void
close_batches(open_batch_t *batches, int n)
{
    if (batches == NULL)
        return;
    for (int k = 0; k < n; k++)
        if (batches[k].out.ba != NULL)
            (void)out_close(&batches[k].out); /* cannot fail: open_batches refused exported ones */
    PyMem_Free(batches);
}

static PyObject *
encode_records(PyObject *self, PyObject *args)
{
    PyObject *keys_obj, *values_obj, *ts_obj, *headers_obj, *rows_obj, *partitions_obj, *into;
    Py_ssize_t count, max_bytes;
    int num_partitions, seal;
    long long now_ms;
    if (!PyArg_ParseTuple(args, "OOOOOOinnLpO", &keys_obj, &values_obj, &ts_obj, &headers_obj, &rows_obj,
                          &partitions_obj, &num_partitions, &count, &max_bytes, &now_ms, &seal, &into))
        return NULL;
    if (count < 0 || num_partitions <= 0 || (partitions_obj == Py_None && num_partitions != 1)) {
        PyErr_Format(PyExc_ValueError, "%zd rows into %d partitions", count, num_partitions);
        return NULL;
    }

    binary_in_t keys, values, hkeys, hvalues;
    fixed_in_t ts, lists, rows, partitions;
    memset(&keys, 0, sizeof(keys));
    memset(&values, 0, sizeof(values));
    memset(&hkeys, 0, sizeof(hkeys));
    memset(&hvalues, 0, sizeof(hvalues));
    memset(&ts, 0, sizeof(ts));
    memset(&lists, 0, sizeof(lists));
    memset(&rows, 0, sizeof(rows));
    memset(&partitions, 0, sizeof(partitions));
    PyObject *result = NULL;
    open_batch_t *batches = NULL;
    long long ts_per_ms = 1;

    if (binary_in_open(&keys, keys_obj, "keys") < 0 || binary_in_open(&values, values_obj, "values") < 0)
        goto done;
    if (ts_obj != Py_None) {
        PyObject *v, *d;
        Py_ssize_t offset;
        if (!PyTuple_Check(ts_obj) || !PyArg_ParseTuple(ts_obj, "OOnL", &v, &d, &offset, &ts_per_ms)) {
            PyErr_SetString(PyExc_TypeError, "timestamps: expected (validity, values, offset, units per ms)");
            goto done;
        }
        if (ts_per_ms <= 0) {
            PyErr_SetString(PyExc_ValueError, "timestamps: units per ms must be positive");
            goto done;
        }
        if (fixed_in_open(&ts, v, d, offset, 8) < 0)
            goto done;
    }
    if (headers_obj != Py_None) {
        PyObject *v, *o, *hk, *hv;
        Py_ssize_t offset;
        if (!PyTuple_Check(headers_obj) || !PyArg_ParseTuple(headers_obj, "OOnOO", &v, &o, &offset, &hk, &hv)) {
            PyErr_SetString(PyExc_TypeError, "headers: expected (validity, offsets, offset, keys, values)");
            goto done;
        }
        if (fixed_in_open(&lists, v, o, offset, 4) < 0 || binary_in_open(&hkeys, hk, "header keys") < 0 ||
            binary_in_open(&hvalues, hv, "header values") < 0)
            goto done;
    }
    if (rows_obj != Py_None) {
        if (fixed_in_open(&rows, Py_None, rows_obj, 0, 8) < 0)
            goto done;
        if (rows.values.len < count * 8) {
            PyErr_Format(PyExc_ValueError, "rows: %zd row numbers given for %zd rows", rows.values.len / 8, count);
            goto done;
        }
    }
    if (partitions_obj != Py_None && fixed_in_open(&partitions, Py_None, partitions_obj, 0, 4) < 0)
        goto done;

    result = PyList_New(num_partitions);
    batches = PyMem_Calloc((size_t)num_partitions, sizeof(open_batch_t));
    if (result == NULL || batches == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int k = 0; k < num_partitions; k++) {
        PyObject *chunks = PyList_New(0);
        if (chunks == NULL)
            goto done;
        PyList_SET_ITEM(result, k, chunks);
    }
    if (open_batches(batches, into, num_partitions) < 0)
        goto done;
    Py_ssize_t header = seal ? BATCH_HEADER : 0;
    const int64_t *ts_values = ts.present ? (const int64_t *)ts.values.buf : NULL;
    const int32_t *list_ends = lists.present ? (const int32_t *)lists.values.buf : NULL;
    const uint64_t *row_numbers = rows.present ? (const uint64_t *)rows.values.buf : NULL;
    const int32_t *partition_of = partitions.present ? (const int32_t *)partitions.values.buf : NULL;
    /* One pass over the rows, each encoded into its partition's open batch: the columns are read
     * in order however the rows are spread. */
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t row = row_numbers ? (Py_ssize_t)row_numbers[i] : i;
        int k = 0;
        if (partition_of) {
            if (fixed_in_valid(&partitions, row, 0) < 0) {
                invalid_row("partitions", row);
                goto done;
            }
            k = partition_of[row];
            if (k < 0 || k >= num_partitions) {
                PyErr_Format(PyExc_ValueError, "row %zd goes to partition %d, not one of 0 to %d", row, k,
                             num_partitions - 1);
                goto done;
            }
        }
        open_batch_t *b = &batches[k];
        out_t *out = &b->out;
        Py_ssize_t delta = b->records;
        if (delta == 0) {
            if (out_reserve(out, header) == NULL)
                goto done;
            b->start = out->len;
            out->len += header;
        }
        int has_t = fixed_in_valid(&ts, row, 0), has_h = fixed_in_valid(&lists, row, 1);
        if (has_t < 0 || has_h < 0) {
            invalid_row(has_t < 0 ? "timestamps" : "headers", row);
            goto done;
        }
        long long t = has_t ? floor_div(ts_values[ts.offset + row], ts_per_ms) : now_ms;
        if (delta == 0)
            b->first_ts = b->max_ts = t;
        else if (t > b->max_ts)
            b->max_ts = t;
        long long first_ts = b->first_ts;
        const uint8_t *key = NULL, *value = NULL;
        int64_t key_len = binary_in_get(&keys, row, &key);
        int64_t value_len = binary_in_get(&values, row, &value);
        if (key_len == INVALID_ROW || value_len == INVALID_ROW) {
            invalid_row(key_len == INVALID_ROW ? "keys" : "values", row);
            goto done;
        }
        Py_ssize_t h_first = 0, h_count = 0;
        if (has_h) {
            h_first = list_ends[lists.offset + row];
            h_count = list_ends[lists.offset + row + 1] - h_first;
            if (h_count < 0) {
                invalid_row("headers", row);
                goto done;
            }
        }
        /* Size first: the record's length prefix comes before it. */
        Py_ssize_t size = 1 + varint_size(t - first_ts) + varint_size(delta) + varint_size(key_len) +
                          (key_len > 0 ? key_len : 0) + varint_size(value_len) + (value_len > 0 ? value_len : 0) +
                          varint_size(h_count);
        for (Py_ssize_t h = h_first; h < h_first + h_count; h++) {
            const uint8_t *at;
            int64_t hk = binary_in_get(&hkeys, h, &at), hv = binary_in_get(&hvalues, h, &at);
            if (hk == INVALID_ROW || hv == INVALID_ROW) {
                invalid_row(hk == INVALID_ROW ? "header keys" : "header values", h);
                goto done;
            }
            if (hk < 0) {
                PyErr_Format(InvalidRecordError, "row %zd has a header with a null key", row);
                goto done;
            }
            size += varint_size(hk) + hk + varint_size(hv) + (hv > 0 ? hv : 0);
        }
        uint8_t *p = out_reserve(out, varint_size(size) + size);
        if (p == NULL)
            goto done;
        uint8_t *begin = p;
        p = write_varint(p, size);
        *p++ = 0; /* attributes */
        p = write_varint(p, t - first_ts);
        p = write_varint(p, delta);
        p = write_varint(p, key_len);
        if (key_len > 0) {
            memcpy(p, key, key_len);
            p += key_len;
        }
        p = write_varint(p, value_len);
        if (value_len > 0) {
            memcpy(p, value, value_len);
            p += value_len;
        }
        p = write_varint(p, h_count);
        for (Py_ssize_t h = h_first; h < h_first + h_count; h++) {
            const uint8_t *hk_at = NULL, *hv_at = NULL;
            int64_t hk = binary_in_get(&hkeys, h, &hk_at), hv = binary_in_get(&hvalues, h, &hv_at);
            p = write_varint(p, hk);
            if (hk > 0) {
                memcpy(p, hk_at, hk);
                p += hk;
            }
            p = write_varint(p, hv);
            if (hv > 0) {
                memcpy(p, hv_at, hv);
                p += hv;
            }
        }
        out->len += p - begin;
        b->records++;
        if (out->len - b->start - header >= max_bytes && close_batch(b, PyList_GET_ITEM(result, k), seal) < 0)
            goto done;
    }
    for (int k = 0; k < num_partitions; k++)
        if (batches[k].records && close_batch(&batches[k], PyList_GET_ITEM(result, k), seal) < 0)
            goto done;
    goto release;

done:
    Py_CLEAR(result);
release:
    close_batches(batches, num_partitions);
    fixed_in_release(&partitions);
    binary_in_release(&keys);
    binary_in_release(&values);
    binary_in_release(&hkeys);
    binary_in_release(&hvalues);
    fixed_in_release(&ts);
    fixed_in_release(&lists);
    fixed_in_release(&rows);
    return result;
}

/* ---- reserve ---- */

PyDoc_STRVAR(reserve_columns_doc,
"reserve_columns(columns, sizes)\n\n"
"Room for sizes[i] bytes in bytearray columns[i], their contents unchanged: what a builder expects\n"
"to hold, so that decoding into it does not reallocate and copy the column as it grows.");

static PyObject *
reserve_columns(PyObject *self, PyObject *args)
{
    PyObject *columns, *sizes;
    if (!PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &columns, &PyTuple_Type, &sizes))
        return NULL;
    if (PyTuple_GET_SIZE(columns) != PyTuple_GET_SIZE(sizes)) {
        PyErr_SetString(PyExc_ValueError, "a size for each column");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(columns); i++) {
        PyObject *ba = PyTuple_GET_ITEM(columns, i);
        Py_ssize_t want = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, i));
        if (want == -1 && PyErr_Occurred())
            return NULL;
        if (!PyByteArray_Check(ba)) {
            PyErr_SetString(PyExc_TypeError, "columns must be bytearrays");
            return NULL;
        }
        Py_ssize_t len = PyByteArray_GET_SIZE(ba);
        if (want <= out_room(ba))
            continue;
        if (PyByteArray_Resize(ba, want) < 0 || set_size(ba, len) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- murmur2 ---- */

/* Four key bytes as one little-endian word. As a function the compiler makes it one load; written
 * out in murmur2's loop it stayed four (2 ns a key more, as much as the division below). */
static inline uint32_t
load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline int32_t
murmur2(const uint8_t *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28c ^ (uint32_t)length;
    Py_ssize_t end = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < end; i += 4) {
        uint32_t k = load_le32(data + i);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[end + 2] << 16; /* fall through */
    case 2:
        h ^= (uint32_t)data[end + 1] << 8; /* fall through */
    case 1:
        h ^= data[end];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

/* x % d for a divisor fixed for a whole column, by multiplications (Lemire, Kaser and Kurz,
 * "Faster remainder by direct computation", 2019): exact for every 32-bit x, and a hardware
 * division per key was a third of the partitioner's time. */
typedef struct {
    uint64_t m;
    uint32_t d;
} fastmod_t;

static inline fastmod_t
fastmod_of(uint32_t d)
{
    fastmod_t f = {UINT64_MAX / d + 1, d};
    return f;
}

static inline uint32_t
fastmod(uint32_t x, fastmod_t f)
{
    uint64_t low = f.m * x;
    return (uint32_t)(((__uint128_t)low * f.d) >> 64);
}

PyDoc_STRVAR(key_partitions_doc,
"key_partitions(n, keys, num_partitions) -> bytes\n\n"
"Kafka's default partition of each of n keys, as int32s; -1 for a null key.");

static PyObject *
key_partitions(PyObject *self, PyObject *args)
{
    Py_ssize_t n;
    PyObject *keys_obj;
    int num_partitions;
    if (!PyArg_ParseTuple(args, "nOi", &n, &keys_obj, &num_partitions))
        return NULL;
    if (num_partitions <= 0) {
        PyErr_SetString(PyExc_ValueError, "num_partitions must be positive");
        return NULL;
    }
    binary_in_t keys;
    if (binary_in_open(&keys, keys_obj, "keys") < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (out != NULL) {
        int32_t *parts = (int32_t *)PyBytes_AS_STRING(out);
        fastmod_t mod = fastmod_of((uint32_t)num_partitions);
        for (Py_ssize_t i = 0; i < n; i++) {
            const uint8_t *key = NULL;
            int64_t len = binary_in_get(&keys, i, &key);
            if (len == INVALID_ROW) {
                invalid_row("keys", i);
                Py_CLEAR(out);
                break;
            }
            parts[i] = len < 0 ? -1 : (int32_t)fastmod((uint32_t)murmur2(key, len) & 0x7fffffff, mod);
        }
    }
    binary_in_release(&keys);
    return out;
}

/* ---- the log cleaner's offset table ---- */

/* MurmurHash3's x64 128-bit variant (seed 0) of a key: a 16-byte digest standing for the key in
 * the offset table, as Kafka's cleaner keeps an MD5 of each key. */
static inline uint64_t
rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t
fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static inline uint64_t
load_le64(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void
murmur3_128(const uint8_t *data, int64_t len, uint64_t out[2])
{
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    uint64_t h1 = 0, h2 = 0;
    int64_t blocks = len / 16;
    for (int64_t i = 0; i < blocks; i++) {
        uint64_t k1 = load_le64(data + 16 * i, 8), k2 = load_le64(data + 16 * i + 8, 8);
        h1 ^= rotl64(k1 * c1, 31) * c2;
        h1 = (rotl64(h1, 27) + h2) * 5 + 0x52dce729;
        h2 ^= rotl64(k2 * c2, 33) * c1;
        h2 = (rotl64(h2, 31) + h1) * 5 + 0x38495ab5;
    }
    const uint8_t *tail = data + 16 * blocks;
    int rest = (int)(len & 15);
    if (rest > 8)
        h2 ^= rotl64(load_le64(tail + 8, rest - 8) * c2, 33) * c1;
    if (rest > 0)
        h1 ^= rotl64(load_le64(tail, rest > 8 ? 8 : rest) * c1, 31) * c2;
    h1 ^= (uint64_t)len;
    h2 ^= (uint64_t)len;
    h1 += h2;
    h2 += h1;
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 += h2;
    h2 += h1;
    out[0] = h1;
    out[1] = h2;
}

/* A table of slots of 24 bytes: a key's digest (two uint64) and its value (int64): 0 for an empty
 * slot, offset + 1 for a record kept, -(offset + 1) for a tombstone past the horizon. The first
 * slot probed is the digest's first half scaled to the table (no division), then the next ones. */
#define SLOT_WORDS 3

static int
table_open(Py_buffer *table, PyObject *obj, int writable, Py_ssize_t *slots)
{
    if (PyObject_GetBuffer(obj, table, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    *slots = table->len / (SLOT_WORDS * 8);
    if (*slots < 1 || table->len % (SLOT_WORDS * 8) || ((uintptr_t)table->buf & 7)) {
        PyErr_SetString(PyExc_ValueError, "table: expected a non-empty, aligned buffer of 24-byte slots");
        PyBuffer_Release(table);
        return -1;
    }
    return 0;
}

/* The slot of `digest`, or the empty slot where it goes; NULL when the table is full without it. */
static inline uint64_t *
table_slot(uint64_t *slots, Py_ssize_t n, const uint64_t digest[2])
{
    Py_ssize_t at = (Py_ssize_t)(((__uint128_t)digest[0] * (uint64_t)n) >> 64);
    for (Py_ssize_t probes = 0; probes < n; probes++) {
        uint64_t *slot = slots + SLOT_WORDS * at;
        if (slot[2] == 0 || (slot[0] == digest[0] && slot[1] == digest[1]))
            return slot;
        if (++at == n)
            at = 0;
    }
    return NULL;
}

PyDoc_STRVAR(offset_table_put_doc,
"offset_table_put(table, keys, count, offsets, expired) -> int\n\n"
"Record each of `count` rows in the table (a writable buffer of 24-byte slots): its key's digest\n"
"with its offset (`offsets`: int64 per row), as a tombstone past the horizon where `expired` (a\n"
"byte per row) is not 0. A later row of a key replaces an earlier one; null keys are skipped.\n"
"Returns how many slots were filled. ValueError when the table fills.");

static PyObject *
offset_table_put(PyObject *self, PyObject *args)
{
    PyObject *table_obj, *keys_obj, *offsets_obj, *expired_obj;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "OOnOO", &table_obj, &keys_obj, &count, &offsets_obj, &expired_obj))
        return NULL;
    Py_buffer table, offsets, expired;
    Py_ssize_t n, filled = 0;
    binary_in_t keys;
    if (table_open(&table, table_obj, 1, &n) < 0)
        return NULL;
    if (binary_in_open(&keys, keys_obj, "keys") < 0) {
        PyBuffer_Release(&table);
        return NULL;
    }
    int have_offsets = PyObject_GetBuffer(offsets_obj, &offsets, PyBUF_SIMPLE) == 0;
    int have_expired = have_offsets && PyObject_GetBuffer(expired_obj, &expired, PyBUF_SIMPLE) == 0;
    int ok = have_expired;
    if (ok && (count < 0 || offsets.len < count * 8 || expired.len < count)) {
        PyErr_Format(PyExc_ValueError, "%zd rows, %zd offsets and %zd flags", count, offsets.len / 8, expired.len);
        ok = 0;
    }
    for (Py_ssize_t i = 0; ok && i < count; i++) {
        const uint8_t *key = NULL;
        int64_t len = binary_in_get(&keys, i, &key);
        if (len == INVALID_ROW) {
            ok = invalid_row("keys", i) == 0;
            break;
        }
        if (len < 0)
            continue;
        uint64_t digest[2];
        murmur3_128(key, len, digest);
        uint64_t *slot = table_slot(table.buf, n, digest);
        if (slot == NULL) {
            PyErr_Format(PyExc_ValueError, "the offset table's %zd slots are full", n);
            ok = 0;
            break;
        }
        int64_t offset;
        memcpy(&offset, (const uint8_t *)offsets.buf + 8 * i, 8);
        filled += slot[2] == 0;
        slot[0] = digest[0];
        slot[1] = digest[1];
        slot[2] = (uint64_t)(((const uint8_t *)expired.buf)[i] ? -(offset + 1) : offset + 1);
    }
    if (have_expired)
        PyBuffer_Release(&expired);
    if (have_offsets)
        PyBuffer_Release(&offsets);
    binary_in_release(&keys);
    PyBuffer_Release(&table);
    return ok ? PyLong_FromSsize_t(filled) : NULL;
}

PyDoc_STRVAR(offset_table_get_doc,
"offset_table_get(table, keys, count) -> bytes\n\n"
"Each of `count` rows' value in the table, an int64 per row (0 where the key is null or absent;\n"
"see offset_table_put).");

static PyObject *
offset_table_get(PyObject *self, PyObject *args)
{
    PyObject *table_obj, *keys_obj;
    Py_ssize_t count, n;
    if (!PyArg_ParseTuple(args, "OOn", &table_obj, &keys_obj, &count))
        return NULL;
    Py_buffer table;
    binary_in_t keys;
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must not be negative");
        return NULL;
    }
    if (table_open(&table, table_obj, 0, &n) < 0)
        return NULL;
    if (binary_in_open(&keys, keys_obj, "keys") < 0) {
        PyBuffer_Release(&table);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * 8);
    for (Py_ssize_t i = 0; out != NULL && i < count; i++) {
        const uint8_t *key = NULL;
        int64_t len = binary_in_get(&keys, i, &key), value = 0;
        if (len == INVALID_ROW) {
            invalid_row("keys", i);
            Py_CLEAR(out);
            break;
        }
        if (len >= 0) {
            uint64_t digest[2];
            murmur3_128(key, len, digest);
            uint64_t *slot = table_slot(table.buf, n, digest);
            value = slot == NULL ? 0 : (int64_t)slot[2];
        }
        memcpy(PyBytes_AS_STRING(out) + 8 * i, &value, 8);
    }
    binary_in_release(&keys);
    PyBuffer_Release(&table);
    return out;
}

PyDoc_STRVAR(offset_table_live_doc,
"offset_table_live(table) -> bytes\n\n"
"The offsets of the records the table keeps (not tombstones past the horizon), an int64 each, in\n"
"order.");

static int
int64_order(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static PyObject *
offset_table_live(PyObject *self, PyObject *table_obj)
{
    Py_buffer table;
    Py_ssize_t n, live = 0;
    if (table_open(&table, table_obj, 0, &n) < 0)
        return NULL;
    const int64_t *slots = table.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        live += slots[SLOT_WORDS * i + 2] > 0;
    PyObject *out = PyBytes_FromStringAndSize(NULL, live * 8);
    if (out != NULL) {
        int64_t *at = (int64_t *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++)
            if (slots[SLOT_WORDS * i + 2] > 0)
                *at++ = slots[SLOT_WORDS * i + 2] - 1;
        /* sorted where they are: no more memory than the offsets take */
        qsort(PyBytes_AS_STRING(out), (size_t)live, 8, int64_order);
    }
    PyBuffer_Release(&table);
    return out;
}

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS, check_records_doc},
    {"decode_batches", decode_batches, METH_VARARGS, decode_batches_doc},
    {"decode_records", decode_records, METH_VARARGS, decode_records_doc},
    {"encode_records", encode_records, METH_VARARGS, encode_records_doc},
    {"keep_records", keep_records, METH_VARARGS, keep_records_doc},
    {"offset_table_get", offset_table_get, METH_VARARGS, offset_table_get_doc},
    {"offset_table_live", offset_table_live, METH_O, offset_table_live_doc},
    {"offset_table_put", offset_table_put, METH_VARARGS, offset_table_put_doc},
    {"key_partitions", key_partitions, METH_VARARGS, key_partitions_doc},
    {"reserve_columns", reserve_columns, METH_VARARGS, reserve_columns_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kop_spark.record._crecords", "Compiled twin of kop_spark.record's hot loops.", -1, methods,
};

PyMODINIT_FUNC
PyInit__crecords(void)
{
    PyObject *errors = PyImport_ImportModule("kop_spark.errors");
    if (errors == NULL)
        return NULL;
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    InvalidRecordError = PyObject_GetAttrString(errors, "InvalidRecordError");
    Py_DECREF(errors);
    if (CorruptRecordError == NULL || InvalidRecordError == NULL)
        return NULL;
    if (crc32c_import() < 0)
        return NULL;
    return PyModule_Create(&module);
}
