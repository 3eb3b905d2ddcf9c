/* Exact search over disjunctive difference constraints (factorspec_cp/difference.py drives it).

   Nodes 0..n-1 are integer variables, node 0 the zero (fixed at 0). An edge (u, v, w) means x_v - x_u <= w.
   A search state is the matrix D of shortest paths (D[a*n+b]: the least bound on x_b - x_a implied so far); adding
   an edge updates it in O(n^2) and fails exactly when it closes a negative cycle. A relation is a list of
   alternatives, each a conjunction of edges: one alternative is a plain constraint, several a disjunction.
   Each candidate (a completion of the declaration's narrow fields, chosen in Python) activates some relations.

   project(): the values x_t takes over every candidate and every choice of alternatives that is consistent: a union
   of intervals (the projection of one consistent system of difference constraints onto x_t is the integer interval
   [-D[t][0], D[0][t]]). A branch whose interval the union found so far covers is cut: nothing below it adds a value.
   feasible(): per group of candidates, whether one of them is consistent (the first consistent leaf ends a group);
   with one solution (the least one, x_b = -D[b][0]) of the first consistent candidate.

   Both are exact, or give up (None) past a budget of search nodes; the caller then asks its solver instead. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

#define INF (1 << 28)

typedef struct {
    int n, R;
    const int *rel_alt;   /* R + 1 offsets into alternatives */
    const int *alt_edge;  /* A + 1 offsets into edges */
    const int *edges;     /* triples u, v, w */
    int *stack;           /* one n*n matrix per depth */
    unsigned char *open;  /* one R-byte "still open" vector per depth */
    int depth_max;
    long nodes, budget;
    int target;
    /* the union of intervals found (project) */
    int *lo, *hi, count, cap;
    /* a solution of the first consistent leaf (feasible) */
    int *solution, have_solution;
    /* plain relations every candidate activates: added once, into the matrix every candidate starts from */
    unsigned char *common;
} Search;

static int add_edge(int *D, int n, int u, int v, int w) {
    if (D[v * n + u] < INF && D[v * n + u] + w < 0) return 0;
    if (D[u * n + v] <= w) return 1;
    for (int a = 0; a < n; a++) {
        int dau = D[a * n + u];
        if (dau >= INF) continue;
        int base = dau + w;
        int *row = D + a * n;
        const int *vrow = D + v * n;
        for (int b = 0; b < n; b++) {
            int dvb = vrow[b];
            if (dvb >= INF) continue;
            int nd = base + dvb;
            if (nd < row[b]) row[b] = nd;
        }
    }
    return 1;
}

/* 0: some edge closes a negative cycle; 1: consistent; 2: every edge already implied */
static int alt_status(const Search *s, const int *D, int alt) {
    int n = s->n, implied = 1;
    for (int e = s->alt_edge[alt]; e < s->alt_edge[alt + 1]; e++) {
        int u = s->edges[3 * e], v = s->edges[3 * e + 1], w = s->edges[3 * e + 2];
        if (D[v * n + u] < INF && D[v * n + u] + w < 0) return 0;
        if (D[u * n + v] > w) implied = 0;
    }
    return implied ? 2 : 1;
}

static int add_alt(const Search *s, int *D, int alt) {
    for (int e = s->alt_edge[alt]; e < s->alt_edge[alt + 1]; e++)
        if (!add_edge(D, s->n, s->edges[3 * e], s->edges[3 * e + 1], s->edges[3 * e + 2])) return 0;
    return 1;
}

static int covered(const Search *s, int lo, int hi) {
    for (int i = 0; i < s->count; i++)
        if (s->lo[i] <= lo && hi <= s->hi[i]) return 1;
    return 0;
}

static int cover(Search *s, int lo, int hi) {
    /* merge [lo, hi] into the sorted, disjoint, non-adjacent intervals */
    int i = 0;
    while (i < s->count && s->hi[i] < lo - 1) i++;
    int j = i;
    while (j < s->count && s->lo[j] <= hi + 1) {
        if (s->lo[j] < lo) lo = s->lo[j];
        if (s->hi[j] > hi) hi = s->hi[j];
        j++;
    }
    int removed = j - i;
    if (removed == 0) {
        if (s->count == s->cap) {
            int cap = s->cap ? 2 * s->cap : 16;
            int *nl = realloc(s->lo, cap * sizeof(int)), *nh;
            if (!nl) return 0;
            s->lo = nl;
            nh = realloc(s->hi, cap * sizeof(int));
            if (!nh) return 0;
            s->hi = nh;
            s->cap = cap;
        }
        memmove(s->lo + i + 1, s->lo + i, (s->count - i) * sizeof(int));
        memmove(s->hi + i + 1, s->hi + i, (s->count - i) * sizeof(int));
        s->count++;
    } else if (removed > 1) {
        memmove(s->lo + i + 1, s->lo + j, (s->count - j) * sizeof(int));
        memmove(s->hi + i + 1, s->hi + j, (s->count - j) * sizeof(int));
        s->count -= removed - 1;
    }
    s->lo[i] = lo;
    s->hi[i] = hi;
    return 1;
}

/* returns 1 to stop everything (a feasible leaf in feasible mode), 0 to go on, -1 past the budget, -2 no memory */
static int dfs(Search *s, int depth, int project) {
    int n = s->n, R = s->R;
    int *D = s->stack + (size_t)depth * n * n;
    unsigned char *open = s->open + (size_t)depth * R;
    if (++s->nodes > s->budget) return -1;
    int changed = 1;
    while (changed) {
        changed = 0;
        for (int r = 0; r < R; r++) {
            if (!open[r]) continue;
            int viable = 0, last = -1, done = 0;
            for (int a = s->rel_alt[r]; a < s->rel_alt[r + 1]; a++) {
                int st = alt_status(s, D, a);
                if (st == 2) { done = 1; break; }
                if (st == 1) { viable++; last = a; }
            }
            if (done) { open[r] = 0; continue; }
            if (viable == 0) return 0;
            if (viable == 1) {
                if (!add_alt(s, D, last)) return 0;
                open[r] = 0;
                changed = 1;
            }
        }
    }
    int t = s->target;
    if (project) {
        int lo = D[t * n] >= INF ? -INF : -D[t * n], hi = D[t] >= INF ? INF : D[t];
        if (covered(s, lo, hi)) return 0;
    }
    int pick = -1;
    for (int r = 0; r < R; r++)
        if (open[r]) { pick = r; break; }
    if (pick < 0) {
        if (project) {
            int lo = -D[t * n], hi = D[t];
            return cover(s, lo, hi) ? 0 : -2;
        }
        if (!s->have_solution) {
            for (int b = 0; b < n; b++) s->solution[b] = -D[b * n];
            s->have_solution = 1;
        }
        return 1;
    }
    if (depth + 1 >= s->depth_max) return -1;
    int *D2 = s->stack + (size_t)(depth + 1) * n * n;
    unsigned char *open2 = s->open + (size_t)(depth + 1) * R;
    for (int a = s->rel_alt[pick]; a < s->rel_alt[pick + 1]; a++) {
        if (alt_status(s, D, a) == 0) continue;
        memcpy(D2, D, (size_t)n * n * sizeof(int));
        memcpy(open2, open, R);
        open2[pick] = 0;
        if (!add_alt(s, D2, a)) continue;
        int res = dfs(s, depth + 1, project);
        if (res != 0) return res;
    }
    return 0;
}

typedef struct {
    Py_buffer base, rel_alt, alt_edge, edges, active;
} Buffers;

static void release(Buffers *b) {
    PyBuffer_Release(&b->base);
    PyBuffer_Release(&b->rel_alt);
    PyBuffer_Release(&b->alt_edge);
    PyBuffer_Release(&b->edges);
    PyBuffer_Release(&b->active);
}

/* The closure of the base edges, and of the plain relations all K candidates activate, into D (0: they are
   inconsistent); those relations are marked common (start() skips them). */
static int closure(Search *s, int *D, const int *base, Py_ssize_t nbase, const unsigned char *active, Py_ssize_t K) {
    int n = s->n;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) D[a * n + b] = a == b ? 0 : INF;
    for (Py_ssize_t e = 0; e < nbase; e++)
        if (!add_edge(D, n, base[3 * e], base[3 * e + 1], base[3 * e + 2])) return 0;
    for (int r = 0; r < s->R; r++) {
        s->common[r] = 0;
        if (K == 0 || s->rel_alt[r + 1] - s->rel_alt[r] != 1) continue;
        Py_ssize_t k = 0;
        while (k < K && active[k * s->R + r]) k++;
        if (k < K) continue;
        s->common[r] = 1;
        if (!add_alt(s, D, s->rel_alt[r])) return 0;
    }
    return 1;
}

/* Start a candidate: its plain relations added into the matrix at depth 0 (from D0), its disjunctions opened. */
static int start(Search *s, const int *D0, const unsigned char *act, int project) {
    int n = s->n, t = s->target;
    int *D = s->stack;
    memcpy(D, D0, (size_t)n * n * sizeof(int));
    for (int r = 0; r < s->R; r++) {
        s->open[r] = 0;
        if (!act[r] || s->common[r]) continue;
        if (s->rel_alt[r + 1] - s->rel_alt[r] == 1) {
            if (!add_alt(s, D, s->rel_alt[r])) return 0;
            /* adding constraints only narrows the target's interval: once the union covers it, nothing to find */
            if (project && covered(s, -D[t * n], D[t])) return 0;
        } else {
            s->open[r] = 1;
        }
    }
    return 1;
}

static int parse(PyObject *args, Search *s, Buffers *b, int *target, Py_ssize_t *K, const char *fmt,
                 PyObject **groups) {
    memset(b, 0, sizeof(*b));
    memset(s, 0, sizeof(*s));
    int n;
    long budget;
    if (groups) {
        if (!PyArg_ParseTuple(args, fmt, &n, &b->base, &b->rel_alt, &b->alt_edge, &b->edges, &b->active, groups,
                              &budget))
            return 0;
    } else if (!PyArg_ParseTuple(args, fmt, &n, &b->base, &b->rel_alt, &b->alt_edge, &b->edges, &b->active, K,
                                 target, &budget)) {
        return 0;
    }
    if (n < 1 || n > 4096 || b->rel_alt.len < (Py_ssize_t)sizeof(int) || b->base.len % (3 * sizeof(int))) {
        release(b);
        PyErr_SetString(PyExc_ValueError, "malformed difference model");
        return 0;
    }
    s->n = n;
    s->R = (int)(b->rel_alt.len / sizeof(int)) - 1;
    s->rel_alt = b->rel_alt.buf;
    s->alt_edge = b->alt_edge.buf;
    s->edges = b->edges.buf;
    s->budget = budget;
    int disjunctions = 0;  /* the depth of the search: one level per disjunction decided */
    for (int r = 0; r < s->R; r++) disjunctions += s->rel_alt[r + 1] - s->rel_alt[r] > 1;
    s->depth_max = disjunctions + 2;
    if (b->active.len % (s->R ? s->R : 1)) {
        release(b);
        PyErr_SetString(PyExc_ValueError, "the active matrix must have one byte per relation per candidate");
        return 0;
    }
    s->stack = malloc((size_t)s->depth_max * n * n * sizeof(int));
    s->open = malloc((size_t)s->depth_max * (s->R ? s->R : 1));
    s->solution = malloc((size_t)n * sizeof(int));
    s->common = malloc(s->R ? s->R : 1);
    if (!s->stack || !s->open || !s->solution || !s->common) {
        release(b);
        free(s->stack); free(s->open); free(s->solution); free(s->common);
        PyErr_NoMemory();
        return 0;
    }
    return 1;
}

static void finish(Search *s, Buffers *b, int *D0) {
    free(s->stack); free(s->open); free(s->solution); free(s->common); free(s->lo); free(s->hi); free(D0);
    release(b);
}

static PyObject *project(PyObject *self, PyObject *args) {
    Search s;
    Buffers b;
    int target;
    Py_ssize_t K;
    if (!parse(args, &s, &b, &target, &K, "iy*y*y*y*y*nil", NULL)) return NULL;
    int n = s.n;
    if (target < 1 || target >= n || K < 0 || b.active.len < K * s.R) {
        finish(&s, &b, NULL);
        PyErr_SetString(PyExc_ValueError, "bad target or too few rows");
        return NULL;
    }
    int *D0 = malloc((size_t)n * n * sizeof(int));
    if (!D0) {
        finish(&s, &b, NULL);
        return PyErr_NoMemory();
    }
    s.target = target;
    int status = 0;
    if (closure(&s, D0, b.base.buf, b.base.len / (3 * sizeof(int)), b.active.buf, K)) {
        int lo = -D0[target * n], hi = D0[target];  /* no candidate takes a value outside: once covered, done */
        for (Py_ssize_t k = 0; k < K && status >= 0 && !covered(&s, lo, hi); k++) {
            if (!start(&s, D0, (const unsigned char *)b.active.buf + k * s.R, 1)) continue;
            status = dfs(&s, 0, 1);
        }
    }
    PyObject *out;
    if (status == -2) {
        out = PyErr_NoMemory();
    } else if (status < 0) {
        out = Py_NewRef(Py_None);
    } else {
        out = PyList_New(s.count);
        for (int i = 0; out && i < s.count; i++)
            PyList_SET_ITEM(out, i, Py_BuildValue("(ii)", s.lo[i], s.hi[i]));
    }
    PyObject *nodes = PyLong_FromLong(s.nodes);
    finish(&s, &b, D0);
    if (!out) { Py_XDECREF(nodes); return NULL; }
    return Py_BuildValue("(NN)", out, nodes);
}

static PyObject *feasible(PyObject *self, PyObject *args) {
    Search s;
    Buffers b;
    PyObject *groups_obj;
    if (!parse(args, &s, &b, NULL, NULL, "iy*y*y*y*y*Ol", &groups_obj)) return NULL;
    int n = s.n;
    Py_buffer g;
    if (PyObject_GetBuffer(groups_obj, &g, PyBUF_SIMPLE) < 0) { finish(&s, &b, NULL); return NULL; }
    Py_ssize_t K = g.len / sizeof(int);
    const int *group = g.buf;
    int ngroups = 0;
    for (Py_ssize_t k = 0; k < K; k++) if (group[k] + 1 > ngroups) ngroups = group[k] + 1;
    int *D0 = malloc((size_t)n * n * sizeof(int));
    unsigned char *ok = calloc(ngroups ? ngroups : 1, 1);
    int witness = -1, status = 0;
    if (!D0 || !ok || b.active.len < K * s.R) {
        PyBuffer_Release(&g);
        free(ok);
        finish(&s, &b, D0);
        return (!D0 || !ok) ? PyErr_NoMemory() : (PyErr_SetString(PyExc_ValueError, "too few rows"), NULL);
    }
    if (closure(&s, D0, b.base.buf, b.base.len / (3 * sizeof(int)), b.active.buf, K)) {
        for (Py_ssize_t k = 0; k < K && status >= 0; k++) {
            if (group[k] < 0 || ok[group[k]]) continue;
            if (!start(&s, D0, (const unsigned char *)b.active.buf + k * s.R, 0)) continue;
            int had = s.have_solution;
            status = dfs(&s, 0, 0);
            if (status == 1) {
                ok[group[k]] = 1;
                if (!had) witness = (int)k;
                status = 0;
            }
        }
    }
    PyObject *out;
    if (status < 0) {
        out = Py_NewRef(Py_None);
    } else {
        PyObject *sol = Py_None;
        if (s.have_solution) {
            sol = PyList_New(n);
            for (int i = 0; sol && i < n; i++) PyList_SET_ITEM(sol, i, PyLong_FromLong(s.solution[i]));
        } else {
            Py_INCREF(sol);
        }
        out = sol ? Py_BuildValue("(y#iN)", (const char *)ok, (Py_ssize_t)ngroups, witness, sol) : NULL;
    }
    PyObject *nodes = PyLong_FromLong(s.nodes);
    PyBuffer_Release(&g);
    free(ok);
    finish(&s, &b, D0);
    if (!out) { Py_XDECREF(nodes); return NULL; }
    return Py_BuildValue("(NN)", out, nodes);
}

static PyMethodDef methods[] = {
    {"project", project, METH_VARARGS,
     "project(n, base, rel_alt, alt_edge, edges, active, candidates, target, budget) -> (intervals or None, nodes)"},
    {"feasible", feasible, METH_VARARGS,
     "feasible(n, base, rel_alt, alt_edge, edges, active, groups, budget) -> ((ok, witness, solution) or None, "
     "nodes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_difference", "Exact search over disjunctive difference constraints.", -1, methods,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__difference(void) { return PyModule_Create(&module); }
