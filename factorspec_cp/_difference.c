/* Exact search over disjunctive difference constraints (factorspec_cp/difference.py drives it).

   Nodes 0..n-1 are integer variables, node 0 the zero (fixed at 0). An edge (u, v, w) means x_v - x_u <= w.
   A search state is the matrix D of shortest paths (D[a*n+b]: the least bound on x_b - x_a implied so far); adding
   an edge updates it in O(n^2) and fails exactly when it closes a negative cycle. A relation is a list of
   alternatives, each a conjunction of edges: one alternative is a plain constraint, several a disjunction.

   The candidates are the rows of a grid (completions of the free narrow fields, in lexicographic order, chosen in
   Python); each activates some relations, and a relation's activation is decided by a prefix of the row (its depth:
   one past the last free field its condition reads). Rows are walked as a trie: the matrix after a prefix is
   shared by every row with that prefix, and a prefix whose constraints are inconsistent (or, when projecting, whose
   interval is already covered) cuts every row below it. At a row's end the disjunctions it activated are searched
   with unit propagation.

   project(): the values x_t takes over every candidate and every choice of alternatives that is consistent: a union
   of intervals (the projection of one consistent system of difference constraints onto x_t is the integer interval
   [-D[t][0], D[0][t]]). A branch whose interval the union found so far covers is cut: nothing below it adds a value.
   feasible(): per group of candidates, whether one of them is consistent (the first consistent leaf ends a group);
   with one solution (the least one, x_b = -D[b][0]) of the first consistent candidate.

   Both are exact, or give up (None) past a budget of search nodes; the caller then asks its solver instead.

   Rows carried between questions: both take `live` (one byte per row: 0 skips a row known inconsistent, or outside
   the caller's assignment, which may fix some of the grid's fields: a relation's depth then counts only the others, as
   the rows searched agree on those; empty: every row) and return `alive`, 0 for each row this search refuted (its prefix or every choice of alternatives
   inconsistent) or was told to skip, 1 for the rest (consistent, or not searched through: a covered cut, a group
   already decided). A row inconsistent under an assignment is inconsistent under every assignment extending it (they
   only add edges), so the caller passes `alive` on as `live` to the questions of extended assignments. So too the
   root matrix (`root`: the shortest paths under the base edges and the relations every row activates; b"" where
   those are inconsistent): the questions of an extended assignment start from it (`start`), and each edge it already
   implies costs one comparison, not an O(n^2) update. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

#define INF (1 << 28)

typedef struct {
    int n, R, m;
    const int *rel_alt;         /* R + 1 offsets into alternatives */
    const int *alt_edge;        /* A + 1 offsets into edges */
    const int *edges;           /* triples u, v, w */
    const unsigned char *active; /* K x R: the relations each row activates */
    const int *grid;            /* K x m: the rows */
    Py_ssize_t K;
    int *at_depth, *depth_start; /* the relations of each depth 0..m, grouped */
    int *prefix;                /* (m + 1) matrices: after each prefix of the current row */
    unsigned char *popen;       /* (m + 1) x R: the disjunctions each prefix opened */
    int *stack;                 /* one n*n matrix per level of the disjunction search */
    unsigned char *open;        /* one R-byte "still open" vector per level */
    int depth_max;
    long nodes, budget;
    int target;
    int *lo, *hi, count, cap;   /* the union of intervals found (project) */
    int *solution, have_solution; /* a solution of the first consistent leaf (feasible) */
    const unsigned char *live;  /* K bytes: the rows to search (others are known inconsistent), or NULL: all */
    unsigned char *alive;       /* K bytes out: 0 where the row is known inconsistent, 1 where it may be consistent */
    int hit;                    /* the current row's search reached a consistent leaf or a covered cut */
    const int *start;           /* n x n: shortest paths under constraints that these imply, to start from, or NULL */
    int have_root;              /* the root matrix (base edges and depth-0 relations) was consistent: prefix[0] */
} Search;

/* row[b] = min(row[b], base + vrow[b]) where vrow[b] is finite: without branches, so the compiler vectorizes it (the
   rows are distinct: add_edge skips row v, which the edge cannot shorten). No overflow: every entry is INF (2^28) or
   bounded by the fields' sizes (below 2^26: the bound edges), base is below 2^28 + 2^26, so base + INF fits int32. */
static inline void relax(int *restrict row, const int *restrict vrow, int base, int n) {
    for (int b = 0; b < n; b++) {
        int dvb = vrow[b], nd = base + dvb, r = row[b];
        row[b] = (dvb < INF && nd < r) ? nd : r;
    }
}

/* add_edge is most of a search's time, and relax most of that: built twice on x86-64 with glibc (GCC or Clang), for
   AVX2 (eight lanes and a signed min) and for the baseline (SSE2: four lanes, the min emulated), the loader choosing
   one for the machine (an ifunc, which glibc provides: not musl). Elsewhere, the baseline build only. */
#if defined(__x86_64__) && defined(__GLIBC__) && (defined(__GNUC__) || defined(__clang__))
#define CLONED __attribute__((target_clones("avx2", "default")))
#else
#define CLONED
#endif

CLONED static int add_edge(int *D, int n, int u, int v, int w) {
    if (D[v * n + u] < INF && D[v * n + u] + w < 0) return 0;
    if (D[u * n + v] <= w) return 1;
    for (int a = 0; a < n; a++) {
        int dau = D[a * n + u];
        /* row v: base = D[v][u] + w >= 0 here (else the cycle check above failed), so nothing in it shortens. A row
           whose way to v the edge does not shorten (D[a][u] + w >= D[a][v]) keeps every entry: a path through the
           edge to b costs at least D[a][v] + D[v][b] >= D[a][b] (D is closed). */
        if (dau >= INF || a == v || dau + w >= D[a * n + v]) continue;
        relax(D + a * n, D + v * n, dau + w, n);
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

static int covered(const Search *s, const int *D) {
    int n = s->n, t = s->target;
    int lo = D[t * n] >= INF ? -INF : -D[t * n], hi = D[t] >= INF ? INF : D[t];
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
            int *nl = realloc(s->lo, cap * sizeof(int));
            if (!nl) return 0;
            s->lo = nl;
            int *nh = realloc(s->hi, cap * sizeof(int));
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

/* The disjunction search at a row's end, from level `depth` of the stack.
   Returns 1 to stop (a consistent leaf, feasible mode), 0 to go on, -1 past the budget, -2 no memory. */
static int dfs(Search *s, int depth, int project) {
    int n = s->n, R = s->R;
    int *D = s->stack + (size_t)depth * n * n;
    unsigned char *open = s->open + (size_t)depth * R;
    if (++s->nodes > s->budget) return -1;
    int changed = 1;
    while (changed) {  /* unit propagation: a disjunction with one viable alternative takes it */
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
    if (project && covered(s, D)) {
        s->hit = 1;  /* not refuted: the row may still be consistent */
        return 0;
    }
    int pick = -1;
    for (int r = 0; r < R; r++)
        if (open[r]) { pick = r; break; }
    if (pick < 0) {
        int t = s->target;
        s->hit = 1;
        if (project) return cover(s, -D[t * n], D[t]) ? 0 : -2;
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

/* Add to prefix level d (copied from d - 1) the relations of depth d that row k activates: 0 where inconsistent. */
static int extend(Search *s, int d, Py_ssize_t k) {
    int n = s->n, R = s->R;
    int *D = s->prefix + (size_t)d * n * n;
    unsigned char *open = s->popen + (size_t)d * R;
    if (d > 0) {
        memcpy(D, D - (size_t)n * n, (size_t)n * n * sizeof(int));
        memcpy(open, open - R, R);
    }
    const unsigned char *act = s->active + k * R;
    for (int i = s->depth_start[d]; i < s->depth_start[d + 1]; i++) {
        int r = s->at_depth[i];
        if (!act[r]) continue;
        if (s->rel_alt[r + 1] - s->rel_alt[r] == 1) {
            if (!add_alt(s, D, s->rel_alt[r])) return 0;
        } else {
            open[r] = 1;
        }
    }
    return 1;
}

/* Every row, as a trie (see the top). `group`/`ok`/`witness`: feasible mode. Returns the dfs status. */
static int rows(Search *s, const int *base, Py_ssize_t nbase, int project, const int *group, unsigned char *ok,
                int *witness) {
    int n = s->n, m = s->m, R = s->R;
    int *D0 = s->prefix;
    if (s->start)  /* (the edges it already implies cost one comparison each below) */
        memcpy(D0, s->start, (size_t)n * n * sizeof(int));
    else
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++) D0[a * n + b] = a == b ? 0 : INF;
    memset(s->popen, 0, R ? R : 1);
    for (Py_ssize_t e = 0; e < nbase; e++)
        if (!add_edge(D0, n, base[3 * e], base[3 * e + 1], base[3 * e + 2])) return 0;
    /* depth 0: what every row to search activates alike (the relations whose conditions read no free field, or only
       fields a caller's `live` fixes: read on the first row searched, as a skipped row may disagree there) */
    Py_ssize_t first = 0;
    if (s->live)
        while (first < s->K && !s->live[first]) first++;
    if (first >= s->K || !extend(s, 0, first)) return 0;
    s->have_root = 1;
    const int *last = NULL;
    int dead = m + 1;  /* the depth at which the last row's prefix was cut (m + 1: it was not) */
    int refuted = 0;   /* ... and whether it was inconsistent there (else its interval was covered) */
    for (Py_ssize_t k = 0; k < s->K; k++) {
        if (s->live && !s->live[k]) continue;  /* known inconsistent: alive[k] stays 0 */
        if (group && ok[group[k]]) {  /* not searched: it may be consistent */
            s->alive[k] = 1;
            continue;
        }
        if (project && covered(s, D0)) {  /* every value any row can take is found: the rest are not searched */
            for (; k < s->K; k++) s->alive[k] = !s->live || s->live[k];
            break;
        }
        const int *row = s->grid + k * m;
        int L = 0;
        if (last) while (L < m && row[L] == last[L]) L++;
        else L = 0;
        if (last && dead <= L) {  /* it shares the prefix that was cut */
            s->alive[k] = !refuted;
            continue;
        }
        last = row;
        dead = m + 1;
        for (int d = L + 1; d <= m; d++) {
            if (++s->nodes > s->budget) return -1;
            if (!extend(s, d, k)) {
                dead = d;
                refuted = 1;
                break;
            }
            if (project && covered(s, s->prefix + (size_t)d * n * n)) {
                dead = d;
                refuted = 0;
                break;
            }
        }
        if (dead <= m) {
            s->alive[k] = !refuted;
            continue;
        }
        memcpy(s->stack, s->prefix + (size_t)m * n * n, (size_t)n * n * sizeof(int));
        memcpy(s->open, s->popen + (size_t)m * R, R);
        int had = s->have_solution;
        s->hit = 0;
        int status = dfs(s, 0, project);
        if (status < 0) return status;
        s->alive[k] = (unsigned char)s->hit;  /* searched through: 0 only where no branch is consistent */
        if (status == 1) {
            ok[group[k]] = 1;
            if (!had) *witness = (int)k;
        }
    }
    return 0;
}

typedef struct {
    Py_buffer base, rel_alt, alt_edge, edges, active, grid, depth, groups, live, start;
} Buffers;

static void release(Buffers *b) {
    PyBuffer_Release(&b->base);
    PyBuffer_Release(&b->rel_alt);
    PyBuffer_Release(&b->alt_edge);
    PyBuffer_Release(&b->edges);
    PyBuffer_Release(&b->active);
    PyBuffer_Release(&b->grid);
    PyBuffer_Release(&b->depth);
    PyBuffer_Release(&b->groups);
    PyBuffer_Release(&b->live);
    PyBuffer_Release(&b->start);
}

static void finish(Search *s, Buffers *b) {
    free(s->stack); free(s->open); free(s->prefix); free(s->popen); free(s->solution);
    free(s->at_depth); free(s->depth_start); free(s->lo); free(s->hi); free(s->alive);
    release(b);
}

/* (n, base, rel_alt, alt_edge, edges, active, K, grid, m, rel_depth, <target or groups>, budget, live, start) */
static int parse(PyObject *args, Search *s, Buffers *b, int project) {
    memset(b, 0, sizeof(*b));
    memset(s, 0, sizeof(*s));
    int n, m;
    long budget;
    Py_ssize_t K;
    int ok = project ? PyArg_ParseTuple(args, "iy*y*y*y*y*ny*iy*ily*y*", &n, &b->base, &b->rel_alt, &b->alt_edge,
                                        &b->edges, &b->active, &K, &b->grid, &m, &b->depth, &s->target, &budget,
                                        &b->live, &b->start)
                     : PyArg_ParseTuple(args, "iy*y*y*y*y*ny*iy*y*ly*y*", &n, &b->base, &b->rel_alt, &b->alt_edge,
                                        &b->edges, &b->active, &K, &b->grid, &m, &b->depth, &b->groups, &budget,
                                        &b->live, &b->start);
    if (!ok) return 0;
    int R = (int)(b->rel_alt.len / sizeof(int)) - 1;
    const char *bad = NULL;
    if (n < 1 || n > 4096 || R < 0 || m < 0 || K < 0 || b->base.len % (3 * sizeof(int)))
        bad = "malformed difference model";
    else if (b->active.len < K * R || b->grid.len < K * m * (Py_ssize_t)sizeof(int) ||
             b->depth.len < R * (Py_ssize_t)sizeof(int))
        bad = "too few rows";
    else if (project && (s->target < 1 || s->target >= n))
        bad = "bad target";
    else if (!project && b->groups.len < K * (Py_ssize_t)sizeof(int))
        bad = "one group per row";
    else if (b->live.len != 0 && b->live.len != K)
        bad = "live: one byte per row, or empty (every row)";
    else if (b->start.len != 0 && b->start.len != (Py_ssize_t)n * n * (Py_ssize_t)sizeof(int))
        bad = "start: an n x n int32 matrix, or empty";
    if (!bad) {  /* offsets within their buffers, nondecreasing; every node below n */
        const int *ra = b->rel_alt.buf, *ae = b->alt_edge.buf, *ed = b->edges.buf, *bs = b->base.buf;
        Py_ssize_t A = b->alt_edge.len / (Py_ssize_t)sizeof(int) - 1, E = b->edges.len / (3 * (Py_ssize_t)sizeof(int));
        Py_ssize_t nb = b->base.len / (3 * (Py_ssize_t)sizeof(int));
        if (A < 0 || ra[0] != 0 || ra[R] > A || ae[0] != 0 || ae[A] > E) bad = "offsets outside their buffers";
        for (int r = 0; !bad && r < R; r++)
            if (ra[r + 1] < ra[r]) bad = "offsets must not decrease";
        for (Py_ssize_t a = 0; !bad && a < A; a++)
            if (ae[a + 1] < ae[a]) bad = "offsets must not decrease";
        for (Py_ssize_t e = 0; !bad && e < 3 * E; e += 3)
            if (ed[e] < 0 || ed[e] >= n || ed[e + 1] < 0 || ed[e + 1] >= n) bad = "an edge's node is outside 0..n-1";
        for (Py_ssize_t e = 0; !bad && e < 3 * nb; e += 3)
            if (bs[e] < 0 || bs[e] >= n || bs[e + 1] < 0 || bs[e + 1] >= n) bad = "an edge's node is outside 0..n-1";
    }
    if (bad) {
        release(b);
        PyErr_SetString(PyExc_ValueError, bad);
        return 0;
    }
    s->n = n; s->R = R; s->m = m; s->K = K;
    s->rel_alt = b->rel_alt.buf;
    s->alt_edge = b->alt_edge.buf;
    s->edges = b->edges.buf;
    s->active = b->active.buf;
    s->grid = b->grid.buf;
    s->budget = budget;
    s->live = b->live.len ? b->live.buf : NULL;
    s->start = b->start.len ? b->start.buf : NULL;
    const int *depth = b->depth.buf;
    int disjunctions = 0;  /* the levels of the disjunction search: one per disjunction decided */
    for (int r = 0; r < R; r++) disjunctions += s->rel_alt[r + 1] - s->rel_alt[r] > 1;
    s->depth_max = disjunctions + 2;
    s->stack = malloc((size_t)s->depth_max * n * n * sizeof(int));
    s->open = malloc((size_t)s->depth_max * (R ? R : 1));
    s->prefix = malloc((size_t)(m + 1) * n * n * sizeof(int));
    s->popen = malloc((size_t)(m + 1) * (R ? R : 1));
    s->solution = malloc((size_t)n * sizeof(int));
    s->at_depth = malloc((size_t)(R ? R : 1) * sizeof(int));
    s->depth_start = calloc((size_t)m + 2, sizeof(int));
    s->alive = calloc((size_t)(K ? K : 1), 1);
    if (!s->alive || !s->stack || !s->open || !s->prefix || !s->popen || !s->solution || !s->at_depth || !s->depth_start) {
        finish(s, b);
        PyErr_NoMemory();
        return 0;
    }
    for (int r = 0; r < R; r++) {  /* group the relations by depth (a counting sort) */
        if (depth[r] < 0 || depth[r] > m) {
            finish(s, b);
            PyErr_SetString(PyExc_ValueError, "a relation's depth is outside 0..m");
            return 0;
        }
        s->depth_start[depth[r] + 1]++;
    }
    for (int d = 0; d <= m; d++) s->depth_start[d + 1] += s->depth_start[d];
    int *fill = calloc((size_t)m + 1, sizeof(int));
    if (!fill) { finish(s, b); PyErr_NoMemory(); return 0; }
    for (int r = 0; r < R; r++) s->at_depth[s->depth_start[depth[r]] + fill[depth[r]]++] = r;
    free(fill);
    return 1;
}

/* What a search passes on to the questions of extended assignments: (alive, root matrix or b"") */
static PyObject *carried(const Search *s) {
    Py_ssize_t size = s->have_root ? (Py_ssize_t)s->n * s->n * (Py_ssize_t)sizeof(int) : 0;
    return Py_BuildValue("(y#y#)", (const char *)s->alive, s->K, (const char *)s->prefix, size);
}

static PyObject *project(PyObject *self, PyObject *args) {
    Search s;
    Buffers b;
    if (!parse(args, &s, &b, 1)) return NULL;
    int status = rows(&s, b.base.buf, b.base.len / (3 * sizeof(int)), 1, NULL, NULL, NULL);
    PyObject *out;
    if (status == -2) {
        out = PyErr_NoMemory();
    } else if (status < 0) {
        out = Py_NewRef(Py_None);
    } else {
        out = PyList_New(s.count);
        for (int i = 0; out && i < s.count; i++) {
            PyObject *pair = Py_BuildValue("(ii)", s.lo[i], s.hi[i]);
            if (!pair) { Py_CLEAR(out); break; }
            PyList_SET_ITEM(out, i, pair);
        }
    }
    long nodes = s.nodes;
    PyObject *extra = out ? carried(&s) : NULL;
    finish(&s, &b);
    if (!extra) {
        Py_XDECREF(out);
        return NULL;
    }
    return Py_BuildValue("(NlN)", out, nodes, extra);
}

static PyObject *feasible(PyObject *self, PyObject *args) {
    Search s;
    Buffers b;
    if (!parse(args, &s, &b, 0)) return NULL;
    const int *group = b.groups.buf;
    int ngroups = 0;
    for (Py_ssize_t k = 0; k < s.K; k++) {
        if (group[k] < 0) {
            finish(&s, &b);
            PyErr_SetString(PyExc_ValueError, "groups are numbered from 0");
            return NULL;
        }
        if (group[k] + 1 > ngroups) ngroups = group[k] + 1;
    }
    unsigned char *ok = calloc(ngroups ? ngroups : 1, 1);
    if (!ok) { finish(&s, &b); return PyErr_NoMemory(); }
    int witness = -1;
    int status = rows(&s, b.base.buf, b.base.len / (3 * sizeof(int)), 0, group, ok, &witness);
    PyObject *out;
    if (status < 0) {
        out = Py_NewRef(Py_None);
    } else {
        PyObject *sol = Py_None;
        if (s.have_solution) {
            sol = PyList_New(s.n);
            for (int i = 0; sol && i < s.n; i++) {
                PyObject *x = PyLong_FromLong(s.solution[i]);
                if (!x) { Py_CLEAR(sol); break; }
                PyList_SET_ITEM(sol, i, x);
            }
        } else {
            Py_INCREF(sol);
        }
        out = sol ? Py_BuildValue("(y#iN)", (const char *)ok, (Py_ssize_t)ngroups, witness, sol) : NULL;
    }
    long nodes = s.nodes;
    PyObject *extra = out ? carried(&s) : NULL;
    free(ok);
    finish(&s, &b);
    if (!extra) {
        Py_XDECREF(out);
        return NULL;
    }
    return Py_BuildValue("(NlN)", out, nodes, extra);
}

/* depths(rel_cols, width, free): each relation's depth (int32 bytes) where some candidate columns are assigned: the
   deepest free column its literals read, as column + 1, or 0 (rel_cols: int32, `width` per relation, each a candidate
   column or -1; free: one byte per column, 1 where it is free). What difference.py's _depths computes with numpy's
   fancy indexing, 12 us a new assignment of the candidates, in one pass. */
static PyObject *depths(PyObject *self, PyObject *args) {
    Py_buffer cols, free;
    int width;
    if (!PyArg_ParseTuple(args, "y*iy*", &cols, &width, &free)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t total = cols.len / (Py_ssize_t)sizeof(int);
    if (width <= 0 || cols.len % (Py_ssize_t)sizeof(int) || total % width) {
        PyErr_SetString(PyExc_ValueError, "depths: int32 columns, `width` per relation");
        goto done;
    }
    Py_ssize_t R = total / width;
    out = PyBytes_FromStringAndSize(NULL, R * (Py_ssize_t)sizeof(int));
    if (!out) goto done;
    const int *c = cols.buf;
    const unsigned char *f = free.buf;
    int *d = (int *)PyBytes_AS_STRING(out);
    for (Py_ssize_t r = 0; r < R; r++) {
        int deepest = 0;
        for (int w = 0; w < width; w++) {
            int j = c[r * width + w];
            if (j < -1 || j >= free.len) {
                Py_CLEAR(out);
                PyErr_SetString(PyExc_IndexError, "depths: a column outside the free flags");
                goto done;
            }
            if (j >= 0 && f[j] && j + 1 > deepest) deepest = j + 1;
        }
        d[r] = deepest;
    }
done:
    PyBuffer_Release(&cols);
    PyBuffer_Release(&free);
    return out;
}

static PyMethodDef methods[] = {
    {"depths", depths, METH_VARARGS, "depths(rel_cols, width, free) -> each relation's depth (int32 bytes)"},
    {"project", project, METH_VARARGS,
     "project(n, base, rel_alt, alt_edge, edges, active, K, grid, m, rel_depth, target, budget, live, start)"
     " -> (intervals or None, nodes, (alive, root))"},
    {"feasible", feasible, METH_VARARGS,
     "feasible(n, base, rel_alt, alt_edge, edges, active, K, grid, m, rel_depth, groups, budget, live, start)"
     " -> ((ok, witness, solution) or None, nodes, (alive, root))"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_difference", "Exact search over disjunctive difference constraints.", -1, methods,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__difference(void) { return PyModule_Create(&module); }
