/* The pre-tokenizer splits of plain text (factorspec_cp/tokenmap/bpe.py: plain_text_split uses them).

   A planner encodes the text of each certain run it plans (a meeting entry's `PM"}, {"person": "Elizabeth", ...`):
   split into pre-tokens by the tokenizer's regex, each pre-token's ids from a memo. Python's `re` took 5 us of the
   11 us such an encode cost in a meeting walk; the split here is one pass over the bytes.

   Four splits, each exactly its pattern's `findall` on plain text (printable ASCII, tab and newline; any other
   character raises ValueError: the caller splits plain text only), where \p{L} is A-Za-z, \p{N} 0-9 and \s space,
   tab or newline:
     0 GPT-2:          's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
     1 GPT-2, digits:  's|'t|'re|'ve|'m|'ll|'d|\p{N}| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+
     2 Qwen2:          (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+
                       |\s+(?!\S)|\s+
     3 Llama 3:        the same with \p{N}{1,3}
   At each position the first alternative that matches decides, as the regex engine's leftmost-first search does;
   the comments below say which alternative each branch is. tests/test_tokenmap_vocab.py compares every split with
   the `regex` module's findall of the pattern on random plain text. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum { L = 1, N = 2, S = 4, P = 8 };

static unsigned char cls[256]; /* 0: not plain text */

static void init_classes(void) {
    for (int c = 0x20; c < 0x7F; c++)
        cls[c] = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ? L : (c >= '0' && c <= '9') ? N : P;
    cls[' '] = cls['\t'] = cls['\n'] = S;
}

static Py_ssize_t run(const unsigned char *s, Py_ssize_t i, Py_ssize_t n, int mask) {
    while (i < n && (cls[s[i]] & mask)) i++;
    return i;
}

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* The length of 's|'t|'re|'ve|'m|'ll|'d at s[i] (a quote), or 0. */
static Py_ssize_t contraction(const unsigned char *s, Py_ssize_t i, Py_ssize_t n, int icase) {
    if (i + 1 >= n) return 0;
    int a = icase ? lower(s[i + 1]) : s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= n) return 0;
    int b = icase ? lower(s[i + 2]) : s[i + 2];
    return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
}

/* Where the pre-token starting at s[i] ends. */
static Py_ssize_t piece_end(const unsigned char *s, Py_ssize_t i, Py_ssize_t n, int kind) {
    int c = cls[s[i]], next = i + 1 < n ? cls[s[i + 1]] : 0;
    Py_ssize_t k;
    if (s[i] == '\'' && (k = contraction(s, i, n, kind >= 2)) > 0) return i + k;
    if (kind <= 1) {
        if (kind == 1 && c == N) return i + 1;                         /* \p{N} */
        if (s[i] == ' ' && (next == L || (next == N && kind == 0) || next == P))
            return run(s, i + 1, n, next);                             /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s..]+' */
        if (c != S) return run(s, i, n, c);                            /* the same without the space */
        Py_ssize_t j = run(s, i, n, S);
        if (j == n || (kind == 1 && cls[s[j]] == N)) return j;         /* \s+(?!\S), \s+(?![^\s\p{N}]) */
        return j - i >= 2 ? j - 1 : j;                                 /* backtracked one; else \s+ */
    }
    if (c != L && c != N && s[i] != '\n' && next == L) return run(s, i + 1, n, L); /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c == L) return run(s, i, n, L);
    if (c == N) {                                                      /* \p{N}, \p{N}{1,3} */
        Py_ssize_t j = kind == 2 ? i + 1 : run(s, i, n, N);
        return j - i > 3 ? i + 3 : j;
    }
    if (c == P || (s[i] == ' ' && next == P)) {                        /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
        Py_ssize_t j = run(s, i + 1, n, P);
        while (j < n && s[j] == '\n') j++;
        return j;
    }
    Py_ssize_t j = run(s, i, n, S);
    for (Py_ssize_t m = j - 1; m >= i; m--)                            /* \s*[\r\n]+: to the run's last newline */
        if (s[m] == '\n') return m + 1;
    if (j == n) return j;                                              /* \s+(?!\S) */
    return j - i >= 2 ? j - 1 : j;                                     /* backtracked one; else \s+ */
}

static PyObject *split(PyObject *self, PyObject *args) {
    int kind;
    PyObject *text;
    if (!PyArg_ParseTuple(args, "iU", &kind, &text)) return NULL;
    if (kind < 0 || kind > 3) {
        PyErr_SetString(PyExc_ValueError, "split: kind is 0 (GPT-2), 1 (GPT-2, digits alone), 2 (Qwen2), 3 (Llama 3)");
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (!PyUnicode_IS_ASCII(text)) goto not_plain;
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!cls[s[i]]) goto not_plain;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t j = piece_end(s, i, n, kind);
        PyObject *piece = PyUnicode_Substring(text, i, j);
        if (piece == NULL || PyList_Append(out, piece) < 0) {
            Py_XDECREF(piece);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(piece);
        i = j;
    }
    return out;
not_plain:
    PyErr_SetString(PyExc_ValueError, "split: the text is not plain (printable ASCII, tab, newline)");
    return NULL;
}

/* known(kind, text, memo): where every pre-token of plain ``text`` has its ids in ``memo`` (a dict: pre-token -> tuple
   of ids), those ids in order, as a list, with the last pre-token: (ids, last); None where one has none (or the text
   is not plain, or empty): the caller splits it and encodes the new ones. A planner's text has about twenty
   pre-tokens, nearly always all known: this is split(), the look-ups and the join in one call (in Python, a map of
   the memo's get, a test of them all and a chain: 3 us warm). */
static PyObject *known(PyObject *self, PyObject *args) {
    int kind;
    PyObject *text, *memo;
    if (!PyArg_ParseTuple(args, "iUO!", &kind, &text, &PyDict_Type, &memo)) return NULL;
    if (kind < 0 || kind > 3) {
        PyErr_SetString(PyExc_ValueError, "known: kind is 0 (GPT-2), 1 (GPT-2, digits alone), 2 (Qwen2), 3 (Llama 3)");
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (n == 0 || !PyUnicode_IS_ASCII(text)) Py_RETURN_NONE;
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!cls[s[i]]) Py_RETURN_NONE;
    PyObject *out = PyList_New(0), *piece = NULL;
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t j = piece_end(s, i, n, kind);
        Py_XDECREF(piece);
        piece = PyUnicode_Substring(text, i, j);
        if (piece == NULL) goto fail;
        PyObject *ids = PyDict_GetItemWithError(memo, piece); /* borrowed */
        if (ids == NULL) {
            if (PyErr_Occurred()) goto fail;
            Py_DECREF(piece);
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        if (!PyTuple_Check(ids)) {
            PyErr_SetString(PyExc_TypeError, "known: the memo's values are tuples of ids");
            goto fail;
        }
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(ids); k++)
            if (PyList_Append(out, PyTuple_GET_ITEM(ids, k)) < 0) goto fail;
        i = j;
    }
    PyObject *result = PyTuple_Pack(2, out, piece);
    Py_DECREF(out);
    Py_DECREF(piece);
    return result;
fail:
    Py_XDECREF(piece);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"split", split, METH_VARARGS, "split(kind, text): the pre-tokens of plain text, by the split numbered kind."},
    {"known", known, METH_VARARGS, "known(kind, text, memo): (ids, last pre-token) where memo has every pre-token's "
                                   "ids, else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pretok", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pretok(void) {
    init_classes();
    return PyModule_Create(&module);
}
