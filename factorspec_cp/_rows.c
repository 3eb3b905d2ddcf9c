/* Mask rows of wide field slots (factorspec_cp/tokenmap/decoder.py, WideTable.row drives it).

   A WideTable lists the tokens that end inside a value of a wide slot, each with the span [lo, hi) of the sorted
   renderings it is a prefix of, grouped into runs by the mask word its bit falls in. Given the admissible counts
   (counts[j]: admissible values among the first j renderings), a token is admitted iff counts[hi] > counts[lo];
   each run's admitted bits are OR-ed into its word. In numpy this is seven calls (take, take, compare, multiply,
   reduceat, a fancy assignment) on arrays of a few dozen entries: measured at 50 us per row between a decoder's
   other work on a 2-core machine, half of a wide row's cost at the model's choices; here one pass. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *wide_row(PyObject *self, PyObject *args) {
    Py_buffer out, counts, lo, hi, bits, uwords, starts;
    if (!PyArg_ParseTuple(args, "w*y*y*y*y*y*y*", &out, &counts, &lo, &hi, &bits, &uwords, &starts)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t nwords = out.len / 4, ncounts = counts.len / 8, n = lo.len / 8, runs = uwords.len / 8;
    if (out.len % 4 || counts.len % 8 || lo.len % 8 || hi.len != lo.len || bits.len != n * 4 ||
        starts.len != uwords.len || uwords.len % 8) {
        PyErr_SetString(PyExc_ValueError, "wide_row: uint32 out and bits, int64 counts, lo, hi, uwords and starts, "
                                          "with lo, hi and bits of one length and uwords and starts of one length");
        goto done;
    }
    uint32_t *o = (uint32_t *)out.buf;
    const int64_t *c = (const int64_t *)counts.buf, *l = (const int64_t *)lo.buf, *h = (const int64_t *)hi.buf;
    const int64_t *w = (const int64_t *)uwords.buf, *s = (const int64_t *)starts.buf;
    const uint32_t *b = (const uint32_t *)bits.buf;
    for (Py_ssize_t r = 0; r < runs; r++) {
        Py_ssize_t a = (Py_ssize_t)s[r], z = r + 1 < runs ? (Py_ssize_t)s[r + 1] : n;
        if (a < 0 || z > n || a > z || w[r] < 0 || w[r] >= nwords) {
            PyErr_SetString(PyExc_IndexError, "wide_row: a run or a word out of range");
            goto done;
        }
        uint32_t word = 0;
        for (Py_ssize_t i = a; i < z; i++) {
            if (l[i] < 0 || l[i] >= ncounts || h[i] < 0 || h[i] >= ncounts) {
                PyErr_SetString(PyExc_IndexError, "wide_row: a span out of the counts' range");
                goto done;
            }
            if (c[h[i]] > c[l[i]]) word |= b[i];
        }
        o[w[r]] |= word;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&counts);
    PyBuffer_Release(&lo);
    PyBuffer_Release(&hi);
    PyBuffer_Release(&bits);
    PyBuffer_Release(&uwords);
    PyBuffer_Release(&starts);
    return result;
}

static PyMethodDef methods[] = {
    {"wide_row", wide_row, METH_VARARGS,
     "wide_row(out, counts, lo, hi, bits, uwords, starts): OR into out (uint32 words) the bits of the tokens whose "
     "span [lo, hi) counts an admissible value (counts: int64), run by run (uwords: each run's word, starts: where "
     "it starts)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rows", "Mask rows of wide field slots.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }
