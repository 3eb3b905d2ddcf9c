/* Mask rows of wide field slots (factorspec_cp/tokenmap/decoder.py: WideTable.row and Decoder._value_fill call it).

   A WideTable lists the tokens that end inside a value of a wide slot, each with the span [lo, hi) of the sorted
   renderings it is a prefix of, grouped into runs by the mask word its bit falls in. Given the admissible counts
   (counts[j]: admissible values among the first j renderings), a token is admitted iff counts[hi] > counts[lo];
   each run's admitted bits are OR-ed into its word. In numpy this is seven calls (take, take, compare, multiply,
   reduceat, a fancy assignment) on arrays of a few dozen entries: measured at 50 us per row between a decoder's
   other work on a 2-core machine, half of a wide row's cost at the model's choices; here one pass. The row is cleared
   here too and the table is one array, so a fill inside a value costs one call with three buffers (seven before, and
   numpy's clear: about 1 us of a 4 us fill at meeting's choices). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *wide_fill(PyObject *self, PyObject *args) {
    Py_buffer out, counts, packed;
    if (!PyArg_ParseTuple(args, "w*y*y*", &out, &counts, &packed)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t nwords = out.len / 4, ncounts = counts.len / 8, len = packed.len / 8;
    const int64_t *p = (const int64_t *)packed.buf;
    if (out.len % 4 || counts.len % 8 || packed.len % 8 || len < 2 || p[0] < 0 || p[1] < 0 || p[0] > len ||
        p[1] > len || len != 2 + 3 * p[0] + 2 * p[1]) {
        PyErr_SetString(PyExc_ValueError, "wide_fill: 32-bit out words, int64 counts, and an int64 table "
                                          "[n, runs, lo[n], hi[n], bits[n], uwords[runs], starts[runs]]");
        goto done;
    }
    Py_ssize_t n = (Py_ssize_t)p[0], runs = (Py_ssize_t)p[1];
    const int64_t *c = (const int64_t *)counts.buf, *l = p + 2, *h = l + n, *b = h + n, *w = b + n, *s = w + runs;
    uint32_t *o = (uint32_t *)out.buf;
    memset(o, 0, (size_t)nwords * 4);
    for (Py_ssize_t r = 0; r < runs; r++) {
        Py_ssize_t a = (Py_ssize_t)s[r], z = r + 1 < runs ? (Py_ssize_t)s[r + 1] : n;
        if (a < 0 || z > n || a > z || w[r] < 0 || w[r] >= nwords) {
            PyErr_SetString(PyExc_IndexError, "wide_fill: a run or a word out of range");
            goto done;
        }
        uint32_t word = 0;
        for (Py_ssize_t i = a; i < z; i++) {
            if (l[i] < 0 || l[i] >= ncounts || h[i] < 0 || h[i] >= ncounts) {
                PyErr_SetString(PyExc_IndexError, "wide_fill: a span out of the counts' range");
                goto done;
            }
            if (c[h[i]] > c[l[i]]) word |= (uint32_t)b[i];
        }
        o[w[r]] |= word;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&counts);
    PyBuffer_Release(&packed);
    return result;
}

/* The admissible counts of a wide slot (factorspec_cp/tokenmap/layout.py: admissible_counts): for a mask over the
   domain (one byte per value) and the domain indices of the sorted renderings (int64), counts[j] = the sum of the mask
   over the first j renderings, as int64 bytes: a WideTable's row reads them, and span_has and span_ends answer an
   asked slot's questions from them. (A list of the counts, bisected in Python, held 900 references that the garbage
   collector traversed at every collection it was young in: 40% of what it traversed on meeting.) */
static PyObject *admissible_counts(PyObject *self, PyObject *args) {
    Py_buffer mask, order;
    if (!PyArg_ParseTuple(args, "y*y*", &mask, &order)) return NULL;
    PyObject *raw = NULL, *result = NULL;
    if (order.len % 8) {
        PyErr_SetString(PyExc_ValueError, "admissible_counts: int64 order");
        goto done;
    }
    Py_ssize_t n = order.len / 8;
    const int64_t *ord = (const int64_t *)order.buf;
    const unsigned char *m = (const unsigned char *)mask.buf;
    raw = PyBytes_FromStringAndSize(NULL, (n + 1) * 8);
    if (raw == NULL) goto done;
    int64_t *c = (int64_t *)PyBytes_AS_STRING(raw), acc = 0;
    c[0] = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t k = ord[j];
        if (k < 0 || k >= mask.len) {
            PyErr_SetString(PyExc_IndexError, "admissible_counts: an order index outside the mask");
            goto done;
        }
        acc += m[k];
        c[j + 1] = acc;
    }
    result = Py_NewRef(raw);
done:
    Py_XDECREF(raw);
    PyBuffer_Release(&mask);
    PyBuffer_Release(&order);
    return result;
}

/* The counts (admissible_counts' int64 bytes) and a span [lo, hi) of sorted positions, from fast-call arguments;
   0 where they are valid (0 <= lo <= hi < the number of counts). */
static int span_args(PyObject *const *args, Py_ssize_t nargs, const char *name, const int64_t **c, Py_ssize_t *lo,
                     Py_ssize_t *hi) {
    if (nargs != 3 || !PyBytes_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s(counts, lo, hi): counts as bytes", name);
        return -1;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    if (n % 8) {
        PyErr_Format(PyExc_ValueError, "%s: int64 counts", name);
        return -1;
    }
    *lo = PyLong_AsSsize_t(args[1]);
    if (*lo == -1 && PyErr_Occurred()) return -1;
    *hi = PyLong_AsSsize_t(args[2]);
    if (*hi == -1 && PyErr_Occurred()) return -1;
    if (*lo < 0 || *hi < *lo || *hi >= n / 8) {
        PyErr_Format(PyExc_IndexError, "%s: the span [%zd, %zd) is outside the counts", name, *lo, *hi);
        return -1;
    }
    *c = (const int64_t *)PyBytes_AS_STRING(args[0]);
    return 0;
}

/* Whether the sorted renderings [lo, hi) count an admissible value: counts[hi] > counts[lo] (an asked slot's prefix
   question, and a token's span in a wide row's checks). */
static PyObject *span_has(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const int64_t *c;
    Py_ssize_t lo, hi;
    if (span_args(args, nargs, "span_has", &c, &lo, &hi)) return NULL;
    return PyBool_FromLong(c[hi] > c[lo]);
}

/* The first and the last sorted position in [lo, hi) whose rendering is admissible, or None: the counts never
   decrease, so the first sits just before the first position past lo holding one more than counts[lo], the last just
   before the first position holding counts[hi] (layout.admissible_ends: two bisections). */
static PyObject *span_ends(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const int64_t *c;
    Py_ssize_t lo, hi;
    if (span_args(args, nargs, "span_ends", &c, &lo, &hi)) return NULL;
    int64_t below = c[lo], upto = c[hi];
    if (upto == below) Py_RETURN_NONE;
    Py_ssize_t a = lo + 1, b = hi + 1;  /* the first j in [lo + 1, hi + 1) with c[j] >= below + 1 */
    while (a < b) {
        Py_ssize_t mid = a + (b - a) / 2;
        if (c[mid] < below + 1) a = mid + 1; else b = mid;
    }
    Py_ssize_t first = a - 1;
    a = lo, b = hi + 1;  /* the first j in [lo, hi + 1) with c[j] >= upto */
    while (a < b) {
        Py_ssize_t mid = a + (b - a) / 2;
        if (c[mid] < upto) a = mid + 1; else b = mid;
    }
    return Py_BuildValue("(nn)", first, a - 1);
}

/* A mask row copied into the caller's row (Decoder.fill_mask: a row computed ahead, with the draft, written where
   the engine asks for it). numpy's row[:] = kept costs about 20,000 instructions of indexing and dtype checks around
   a 19 KB memcpy on Qwen3's vocabulary; this is the memcpy. */
static PyObject *copy_row(PyObject *self, PyObject *args) {
    Py_buffer out, src;
    if (!PyArg_ParseTuple(args, "w*y*", &out, &src)) return NULL;
    PyObject *result = NULL;
    if (out.len != src.len) {
        PyErr_SetString(PyExc_ValueError, "copy_row: rows of different sizes");
    } else {
        memcpy(out.buf, src.buf, (size_t)out.len);
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&src);
    return result;
}

/* The bits of token ids (int64) set in a row of 32-bit words, the row cleared first where `clear`: or_bits and
   ids_fill below. Every id is checked before anything is written. */
static PyObject *set_bits(PyObject *args, int clear, const char *name) {
    Py_buffer out, ids;
    if (!PyArg_ParseTuple(args, "w*y*", &out, &ids)) return NULL;
    PyObject *result = NULL;
    if (out.len % 4 || ids.len % 8) {
        PyErr_Format(PyExc_ValueError, "%s: 32-bit row words and int64 ids", name);
        goto done;
    }
    uint32_t *o = (uint32_t *)out.buf;
    const int64_t *t = (const int64_t *)ids.buf;
    Py_ssize_t nwords = out.len / 4, n = ids.len / 8;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (t[i] < 0 || t[i] / 32 >= nwords) {
            PyErr_Format(PyExc_IndexError, "%s: a token id outside the row", name);
            goto done;
        }
    }
    if (clear) memset(o, 0, (size_t)nwords * 4);
    for (Py_ssize_t i = 0; i < n; i++) o[t[i] >> 5] |= (uint32_t)1 << (t[i] & 31);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&ids);
    return result;
}

/* A few token ids' bits set in a row (a wide row's tokens checked in under the solver, EOS): numpy's
   bitwise_or.at costs 5-10 us on a handful of ids, this a loop. */
static PyObject *or_bits(PyObject *self, PyObject *args) { return set_bits(args, 0, "or_bits"); }

/* A row of few admitted tokens written into the caller's row (Decoder.fill_mask, a choice among a few values: a
   ChoiceTable's union of at most SPARSE_IDS ids, kept as the ids): the row cleared, then their bits set. A dense row
   kept for it (19 KB on Qwen3's vocabulary, shared by every declaration with the layout and so mostly out of cache
   where a record reaches it) cost its copy's cache misses, 3-4 us of a 7 us fill on calendar. */
static PyObject *ids_fill(PyObject *self, PyObject *args) { return set_bits(args, 1, "ids_fill"); }

static PyMethodDef methods[] = {
    {"or_bits", or_bits, METH_VARARGS, "or_bits(out, ids): set the bits of the token ids (int64) in out's 32-bit words"},
    {"ids_fill", ids_fill, METH_VARARGS,
     "ids_fill(out, ids): set out's 32-bit words to 0, then set the bits of the token ids (int64)"},
    {"copy_row", copy_row, METH_VARARGS, "copy_row(out, src): copy the bytes of src into out (same size)"},
    {"admissible_counts", admissible_counts, METH_VARARGS,
     "admissible_counts(mask, order): counts as int64 bytes, where counts[j] is the sum of mask (one byte per domain "
     "value) over the domain indices order[:j] (int64)"},
    {"span_has", (PyCFunction)(void (*)(void))span_has, METH_FASTCALL,
     "span_has(counts, lo, hi): counts[hi] > counts[lo] (counts: int64 bytes, non-decreasing)"},
    {"span_ends", (PyCFunction)(void (*)(void))span_ends, METH_FASTCALL,
     "span_ends(counts, lo, hi): (first, last), the first and the last j in [lo, hi) with counts[j + 1] > counts[j], "
     "or None where counts[hi] == counts[lo] (counts: int64 bytes, non-decreasing)"},
    {"wide_fill", wide_fill, METH_VARARGS,
     "wide_fill(out, counts, table): set out's 32-bit words to 0, then OR into them the bits of the tokens whose span "
     "[lo, hi) counts an admissible value (counts: int64), run by run; table: one int64 array [n, runs, lo[n], hi[n], "
     "bits[n], uwords[runs] (each run's word), starts[runs] (where it starts)]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rows", "Mask rows of wide field slots.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }
