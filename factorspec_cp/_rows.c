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

static PyMethodDef methods[] = {
    {"wide_fill", wide_fill, METH_VARARGS,
     "wide_fill(out, counts, table): set out's 32-bit words to 0, then OR into them the bits of the tokens whose span "
     "[lo, hi) counts an admissible value (counts: int64), run by run; table: one int64 array [n, runs, lo[n], hi[n], "
     "bits[n], uwords[runs] (each run's word), starts[runs] (where it starts)]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rows", "Mask rows of wide field slots.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }
