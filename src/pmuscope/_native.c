/*
 * pmuscope._native: the few things Python cannot do at SHIM speed.
 *
 *   rdtsc()                      x86 TSC / arm64 CNTVCT_EL0
 *   rdpmc(index)                 x86 user-space counter read (index = mmap page index - 1)
 *   mmap_read(addr)              the kernel's self-monitoring seqlock protocol over a
 *                                perf_event_mmap_page (include/uapi/linux/perf_event.h),
 *                                returns (count, enabled, running) or None when the
 *                                counter is not readable from user space (index == 0)
 *   sample_loop(fds, size, n, period_ns, stamps, data[, start, slot, slots, spin_ns])
 *                                up to n samples on a grid of deadlines (slot `slot` of
 *                                `slots`, period_ns apart from `start`, CLOCK_MONOTONIC; 0:
 *                                now; period 0: back to back), each a read(2) of every fd
 *                                bracketed by two CLOCK_MONOTONIC_RAW stamps; fills two
 *                                writable buffers (stamps: 2*n u64, data: n*len(fds)*size
 *                                bytes); returns (taken, late, next slot, start); GIL released.
 *   dwarf_unwind(...)            DWARF CFI unwinding of many samples' user stack copies with
 *                                rule rows compiled by pmuscope.unwind.batch; GIL released.
 *   monitor_loop(plan, buf, rec, ts, idx, late, skipped, i, n, k, start, interval, tolerance,
 *                last, ctx_every, ctx_state, alive_every, stop[, clock])
 *                                pmuscope monitor's sampling loop: sleep to absolute deadlines,
 *                                read every group into a chunk buffer; GIL released (see below).
 *   CountsReader(cls, fill, clear, layout, units, read=None)
 *                                Counter.read() in one C call: read(2) of every (fd, size)
 *                                read unit, then a new `cls` instance (pmuscope.counting's
 *                                Counts) with its slots filled directly; see below.
 *   next_boundary, walk_records, sample_fields
 *                                perf.data record walking and fixed-layout sample fields, one
 *                                call per chunk (pmuscope.records.native; see that section).
 *   resolve_round(...), collapse_add(...), take_flat(...)
 *                                the profile builder's per-round call-chain walk and frame
 *                                cache, the collapser's rows and chains (section "profile
 *                                building" below; PMUSCOPE_NATIVE_RESOLVE=0: numpy path).
 *
 * The pure-Python implementations in pmuscope.observe and pmuscope.counting are the
 * reference; this module is optional and tested against them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <structmember.h>

#if defined(__x86_64__) || defined(__i386__)
#define HAVE_RDPMC 1
static inline uint64_t do_rdtsc(void) {
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}
static inline uint64_t do_rdpmc(uint32_t counter) {
    uint32_t lo, hi;
    __asm__ __volatile__("rdpmc" : "=a"(lo), "=d"(hi) : "c"(counter));
    return ((uint64_t)hi << 32) | lo;
}
#elif defined(__aarch64__)
#define HAVE_RDPMC 0
static inline uint64_t do_rdtsc(void) {
    uint64_t v;
    __asm__ __volatile__("isb; mrs %0, cntvct_el0" : "=r"(v));
    return v;
}
static inline uint64_t do_rdpmc(uint32_t counter) { (void)counter; return 0; }
#else
#define HAVE_RDPMC 0
static inline uint64_t do_rdtsc(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static inline uint64_t do_rdpmc(uint32_t counter) { (void)counter; return 0; }
#endif

#define barrier() __asm__ __volatile__("" ::: "memory")

static PyObject *py_rdtsc(PyObject *self, PyObject *noargs) {
    return PyLong_FromUnsignedLongLong(do_rdtsc());
}

static PyObject *py_rdpmc(PyObject *self, PyObject *arg) {
#if HAVE_RDPMC
    unsigned long idx = PyLong_AsUnsignedLong(arg);
    if (PyErr_Occurred()) return NULL;
    return PyLong_FromUnsignedLongLong(do_rdpmc((uint32_t)idx));
#else
    PyErr_SetString(PyExc_NotImplementedError, "rdpmc is not available on this architecture");
    return NULL;
#endif
}

/* PAPI's mmap_read_self() / the kernel's documented loop, in C. */
static PyObject *py_mmap_read(PyObject *self, PyObject *arg) {
    uintptr_t addr = (uintptr_t)PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) return NULL;
    volatile struct perf_event_mmap_page *pc = (volatile struct perf_event_mmap_page *)addr;
    uint32_t seq, idx, width;
    uint64_t enabled, running, cyc = 0, time_offset = 0, time_mult = 0, time_shift = 0;
    uint64_t time_cycles = 0, time_mask = 0;
    int64_t count, pmc;
    int user_time, have_short;
    do {
        seq = pc->lock;
        barrier();
        enabled = pc->time_enabled;
        running = pc->time_running;
        user_time = pc->cap_user_time;
        have_short = pc->cap_user_time_short;
        if (user_time && enabled != running) {
            cyc = do_rdtsc();
            time_offset = pc->time_offset;
            time_mult = pc->time_mult;
            time_shift = pc->time_shift;
            if (have_short) {
                time_cycles = pc->time_cycles;
                time_mask = pc->time_mask;
            }
        }
        idx = pc->index;
        count = pc->offset;
        if (!(pc->cap_user_rdpmc && idx) || !HAVE_RDPMC) {
            Py_RETURN_NONE;
        }
        width = pc->pmc_width;
        pmc = (int64_t)do_rdpmc(idx - 1);
        pmc <<= 64 - width;
        pmc >>= 64 - width;
        count += pmc;
        barrier();
    } while (pc->lock != seq);

    if (user_time && enabled != running) {
        uint64_t quot, rem, delta;
        if (have_short) cyc = time_cycles + ((cyc - time_cycles) & time_mask);
        quot = cyc >> time_shift;
        rem = cyc & (((uint64_t)1 << time_shift) - 1);
        delta = time_offset + quot * time_mult + ((rem * time_mult) >> time_shift);
        enabled += delta;
        if (idx) running += delta;
    }
    return Py_BuildValue("(LKK)", (long long)count, (unsigned long long)enabled, (unsigned long long)running);
}

static inline uint64_t now_raw(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define SL_MAX_FDS 1024

/* Read every fd of `fds` (one read unit each, `size` bytes) inside one bracket of two
 * CLOCK_MONOTONIC_RAW stamps, on a grid of CLOCK_MONOTONIC deadlines start + slot * period.
 * A slot missed by more than half a period is skipped (counted in `late`), never caught
 * up with back-to-back reads: a burst of reads makes periods of a few hundred ns whose DTE
 * budget (a percent of the period) no read can meet. Waits longer than spin_ns sleep until
 * spin_ns before the deadline and spin the rest, so the read starts on time and warm. */
static int parse_fds(PyObject *obj, int *fds, Py_ssize_t *nfd) {
    if (PyLong_Check(obj)) {
        fds[0] = (int)PyLong_AsLong(obj);
        *nfd = 1;
        return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *seq = PySequence_Fast(obj, "sample_loop: fds must be an int or a sequence of ints");
    if (seq == NULL) return -1;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    if (k < 1 || k > SL_MAX_FDS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "sample_loop: 1 to %d fds", SL_MAX_FDS);
        return -1;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        fds[j] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, j));
        if (PyErr_Occurred()) { Py_DECREF(seq); return -1; }
    }
    Py_DECREF(seq);
    *nfd = k;
    return 0;
}

static PyObject *py_sample_loop(PyObject *self, PyObject *args) {
    PyObject *fdobj;
    Py_ssize_t size, n, nfd = 0;
    unsigned long long period_ns, start = 0, slot = 0, slots = 0, spin_ns = 60000;
    int fds[SL_MAX_FDS];
    Py_buffer stamps, data;
    if (!PyArg_ParseTuple(args, "OnnKw*w*|KKKK", &fdobj, &size, &n, &period_ns, &stamps, &data, &start, &slot,
                          &slots, &spin_ns))
        return NULL;
    if (parse_fds(fdobj, fds, &nfd) < 0 || size <= 0 || n < 0 ||
        stamps.len < (Py_ssize_t)(2 * n * sizeof(uint64_t)) || data.len < n * nfd * size) {
        PyBuffer_Release(&stamps);
        PyBuffer_Release(&data);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "sample_loop: output buffers too small for n samples");
        return NULL;
    }
    if (slots == 0) slots = slot + (unsigned long long)n;
    uint64_t *st = (uint64_t *)stamps.buf;
    char *out = (char *)data.buf;
    Py_ssize_t row = nfd * size, taken = 0;
    unsigned long long late = 0;
    int err = 0;
    /* the reads land in this scratch row and the stamps in locals, copied out after the
     * bracket: the first store to each fresh page of the output arrays faults, and a fault
     * inside the bracket shows as jitter */
    char *scratch = PyMem_RawMalloc((size_t)row);
    if (scratch == NULL) {
        PyBuffer_Release(&stamps);
        PyBuffer_Release(&data);
        return PyErr_NoMemory();
    }
    memset(scratch, 0, (size_t)row);
    Py_BEGIN_ALLOW_THREADS
    if (start == 0) start = now_mono() - slot * period_ns;
    while (taken < n && slot < slots) {
        if (period_ns) {
            uint64_t deadline = start + slot * period_ns;
            uint64_t t = now_mono();
            if (t > deadline + period_ns / 2) {
                unsigned long long next = (t - start + period_ns - 1) / period_ns;
                if (next > slots) next = slots;
                late += next - slot;
                slot = next;
                continue;
            }
            if (t < deadline) {
                if (deadline - t > spin_ns) {
                    uint64_t wake = deadline - spin_ns;
                    struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
                    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
                }
                while ((t = now_mono()) < deadline) ;
                if (t > deadline + period_ns / 2) continue; /* preempted while waiting: skip */
            }
        }
        Py_ssize_t j;
        ssize_t r = 0;
        uint64_t cs = now_raw();
        for (j = 0; j < nfd; j++) {
            r = read(fds[j], scratch + j * size, (size_t)size);
            if (r != size) break;
        }
        uint64_t ce = now_raw();
        if (r != size) { err = r < 0 ? errno : EIO; break; }
        st[2 * taken] = cs;
        st[2 * taken + 1] = ce;
        memcpy(out + taken * row, scratch, (size_t)row);
        taken++;
        slot++;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(scratch);
    PyBuffer_Release(&stamps);
    PyBuffer_Release(&data);
    if (err && taken == 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("(nKKK)", taken, late, slot, start);
}


/* ---- monitor_loop --------------------------------------------------------------------------
 *
 * pmuscope.counting.monitor's sampling loop (Monitor._loop_python is the reference; the
 * arithmetic is the same line by line). From interval slot `i` of a chunk with `n` slots and
 * deadline number `k`: sleep to deadline start + k*interval (clock_nanosleep TIMER_ABSTIME on
 * CLOCK_MONOTONIC), read every group (plan: int64 triples fd, byte offset, size) into
 * buf[i*rec + offset], record ts/idx/late/skipped[i], and go on until the chunk is full or
 * Python has something to do: flags bit 0 = a context sample is due for row i-1 (the interval
 * crossed a multiple of ctx_every: ctx_state[0] counts these crossings and only every
 * ctx_state[1]-th is a sample, so a machine whose only context is /proc/stat's utilization
 * is not returned to between its samples), bit 1 = the
 * run ended (deadline `last` passed, or stop[0] was set by another thread), bit 2 = the
 * monitored process should be looked for (k a multiple of alive_every). Returns (i, k, flags).
 * `clock`, when given, is a writable int64 buffer [cursor, reading, reading, ...]: the readings
 * from 1 + cursor on are used in turn instead of CLOCK_MONOTONIC (cursor is advanced) and
 * nothing sleeps: the seam the tests use to compare this loop with Python's.
 */
static PyObject *py_monitor_loop(PyObject *self, PyObject *args) {
    Py_buffer plan, buf, ts_b, idx_b, late_b, skip_b, ctx_b, stop_b, clock_b = {0};
    Py_ssize_t rec, i, n;
    long long k, start, interval, tolerance, last, ctx_every, alive_every;
    if (!PyArg_ParseTuple(args, "y*w*nw*w*w*w*nnLLLLLLw*Lw*|w*", &plan, &buf, &rec, &ts_b, &idx_b, &late_b, &skip_b,
                          &i, &n, &k, &start, &interval, &tolerance, &last, &ctx_every, &ctx_b, &alive_every, &stop_b,
                          &clock_b))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t nslots = plan.len / (Py_ssize_t)(3 * sizeof(int64_t));
    const int64_t *pl = (const int64_t *)plan.buf;
    int ok = interval > 0 && i >= 0 && n >= i && rec >= 0 && buf.len >= n * rec && ts_b.len >= n * 8 &&
             idx_b.len >= n * 8 && late_b.len >= n && skip_b.len >= n * 4 && stop_b.len >= 1 && ctx_b.len >= 16 &&
             ((int64_t *)ctx_b.buf)[1] > 0;
    for (Py_ssize_t s = 0; ok && s < nslots; s++)
        ok = pl[3 * s + 1] >= 0 && pl[3 * s + 2] >= 0 && pl[3 * s + 1] + pl[3 * s + 2] <= rec;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "monitor_loop: inconsistent plan or buffers");
        goto done;
    }
    {
        char *out = (char *)buf.buf;
        int64_t *ts = (int64_t *)ts_b.buf, *idx = (int64_t *)idx_b.buf;
        uint8_t *late = (uint8_t *)late_b.buf;
        int32_t *skipped = (int32_t *)skip_b.buf;
        volatile uint8_t *stop = (volatile uint8_t *)stop_b.buf;
        int64_t *ctx_state = (int64_t *)ctx_b.buf;
        int64_t *fake = clock_b.buf && clock_b.len >= 8 ? (int64_t *)clock_b.buf + 1 : NULL;
        Py_ssize_t nfake = fake ? clock_b.len / 8 - 1 : 0, used = fake ? (Py_ssize_t)fake[-1] : 0;
        int flags = 0, err = 0, clock_out = 0;
        Py_BEGIN_ALLOW_THREADS
        while (i < n) {
            long long deadline = start + k * interval, now;
#define MON_CLOCK()                                                                     \
            do {                                                                        \
                if (fake) {                                                             \
                    if (used < 0 || used >= nfake) { clock_out = 1; break; }            \
                    now = fake[used++];                                                 \
                } else {                                                                \
                    struct timespec t_;                                                 \
                    clock_gettime(CLOCK_MONOTONIC, &t_);                                \
                    now = (long long)t_.tv_sec * 1000000000LL + t_.tv_nsec;             \
                }                                                                       \
            } while (0)
            MON_CLOCK();
            if (clock_out) break;
            if (now < deadline) {
                if (!fake) {
                    struct timespec d = {(time_t)(deadline / 1000000000LL), (long)(deadline % 1000000000LL)};
                    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL) == EINTR) ;
                }
                MON_CLOCK();
                if (clock_out) break;
            }
#undef MON_CLOCK
            char *row = out + i * rec;
            for (Py_ssize_t s = 0; s < nslots; s++) {
                ssize_t r = read((int)pl[3 * s], row + pl[3 * s + 1], (size_t)pl[3 * s + 2]);
                if (r < 0) { err = errno; break; }
            }
            if (err) break;
            long long lateness = now - deadline;
            long long skip = lateness >= interval ? lateness / interval : 0;
            if (last > 0 && k + skip > last) skip = last - k;
            ts[i] = now;
            idx[i] = k;
            late[i] = lateness > tolerance;
            skipped[i] = (int32_t)skip;
            i++;
            if (ctx_every && k / ctx_every != (k - 1 - skip) / ctx_every && ++ctx_state[0] % ctx_state[1] == 0)
                flags |= 1;
            k += 1 + skip;
            if ((last > 0 && k > last) || *stop) flags |= 2;
            if (alive_every && k % alive_every == 0) flags |= 4;
            if (flags) break;
        }
        Py_END_ALLOW_THREADS
        if (fake) fake[-1] = used;
        if (err) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
        } else if (clock_out) {
            PyErr_SetString(PyExc_StopIteration, "monitor_loop: the fake clock ran out");
        } else {
            result = Py_BuildValue("(nLi)", i, k, flags);
        }
    }
done:
    PyBuffer_Release(&plan);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&ts_b);
    PyBuffer_Release(&idx_b);
    PyBuffer_Release(&late_b);
    PyBuffer_Release(&skip_b);
    PyBuffer_Release(&ctx_b);
    PyBuffer_Release(&stop_b);
    if (clock_b.buf) PyBuffer_Release(&clock_b);
    return result;
}


/* ---- CountsReader -------------------------------------------------------------------------
 *
 * Why: one read() of a software counter costs ~0.25 us; the Python read path (a call into
 * the read plan, a list, time.monotonic_ns(), Counts.__init__) doubled that. This type does
 * the same steps in one call:
 *
 *   reader(start_ns) -> cls instance with
 *       fill[0] = layout, fill[1] = (bytes per read unit), fill[2] = CLOCK_MONOTONIC ns after
 *       the reads (time.monotonic_ns()), fill[3] = start_ns, and every slot in `clear` = None.
 *
 * `cls.__init__` is not called: the instance is allocated with tp_alloc and its __slots__
 * (member descriptors of type T_OBJECT_EX, looked up by name once, here) are stored at their
 * offsets. `read`, when not None, is called as read(fd, size) -> bytes instead of read(2):
 * the seam the unit tests' fake kernel uses.
 */

#define CR_FILL 4
#define CR_MAX_CLEAR 8

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    PyObject *layout;
    PyObject *read;             /* NULL: read(2) */
    Py_ssize_t fill[CR_FILL];   /* slot offsets */
    Py_ssize_t clear[CR_MAX_CLEAR];
    Py_ssize_t n_clear;
    Py_ssize_t n;               /* read units */
    int *fds;
    Py_ssize_t *sizes;
} CountsReader;

static int slot_offset(PyTypeObject *cls, PyObject *name, Py_ssize_t *offset) {
    PyObject *d = PyObject_GetAttr((PyObject *)cls, name);
    if (d == NULL) return -1;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
             ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX &&
             !(((PyMemberDescrObject *)d)->d_member->flags & READONLY) &&
             PyType_IsSubtype(cls, PyDescr_TYPE(d));
    if (ok) *offset = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "CountsReader: %R is not a __slots__ attribute of %s", name, cls->tp_name);
        return -1;
    }
    return 0;
}

static void set_slot(PyObject *obj, Py_ssize_t offset, PyObject *value) {
    /* steals `value`; the slot is empty (fresh from tp_alloc) */
    *(PyObject **)((char *)obj + offset) = value;
}

static PyObject *cr_read_unit(CountsReader *self, Py_ssize_t i) {
    /* the Python seam: read(fd, size) -> bytes */
    PyObject *res = PyObject_CallFunction(self->read, "in", self->fds[i], self->sizes[i]);
    if (res != NULL && !PyBytes_Check(res)) {
        PyErr_Format(PyExc_TypeError, "CountsReader: read() returned %.100s, not bytes", Py_TYPE(res)->tp_name);
        Py_CLEAR(res);
    }
    return res;
}

static PyObject *cr_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    CountsReader *self = (CountsReader *)op;
    Py_ssize_t i, n = self->n;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "CountsReader(start_ns) takes one positional argument");
        return NULL;
    }
    /* a tuple, not a list: one allocation (from the tuple free list) instead of two */
    PyObject *raws = PyTuple_New(n);
    if (raws == NULL) return NULL;
    if (self->read != NULL) {
        for (i = 0; i < n; i++) {
            PyObject *b = cr_read_unit(self, i);
            if (b == NULL) goto fail;
            PyTuple_SET_ITEM(raws, i, b);
        }
    } else {
        for (i = 0; i < n; i++) {
            PyObject *b = PyBytes_FromStringAndSize(NULL, self->sizes[i]);
            if (b == NULL) goto fail;
            PyTuple_SET_ITEM(raws, i, b);
        }
        /* as os.read: the GIL is released around the reads, EINTR retried after the
           signal handlers ran (PEP 475), any other error raised as OSError */
        for (i = 0; i < n;) {
            ssize_t got = 0;
            int err = 0;
            Py_BEGIN_ALLOW_THREADS
            for (; i < n; i++) {
                /* syscall(), not glibc's read(): read() is a cancellation point and brackets
                   the syscall with pthread asynccancel calls, ~10 ns at this scale */
                got = syscall(SYS_read, self->fds[i], PyBytes_AS_STRING(PyTuple_GET_ITEM(raws, i)),
                              (size_t)self->sizes[i]);
                if (got != self->sizes[i]) {
                    err = got < 0 ? errno : 0;
                    break;
                }
            }
            Py_END_ALLOW_THREADS
            if (i == n) break;
            if (got < 0) {
                if (err == EINTR) {
                    if (PyErr_CheckSignals() < 0) goto fail;
                    continue;
                }
                errno = err;
                PyErr_SetFromErrno(PyExc_OSError);
                goto fail;
            }
            /* a short read: keep what came, as os.read would */
            PyObject *b = PyTuple_GET_ITEM(raws, i);
            PyTuple_SET_ITEM(raws, i, NULL);
            if (_PyBytes_Resize(&b, got) < 0) goto fail;
            PyTuple_SET_ITEM(raws, i, b);
            i++;
        }
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    PyObject *stamp = PyLong_FromLongLong((long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    if (stamp == NULL) goto fail;
    PyObject *obj = self->cls->tp_alloc(self->cls, 0);
    if (obj == NULL) {
        Py_DECREF(stamp);
        goto fail;
    }
    set_slot(obj, self->fill[0], Py_NewRef(self->layout));
    set_slot(obj, self->fill[1], raws);
    set_slot(obj, self->fill[2], stamp);
    set_slot(obj, self->fill[3], Py_NewRef(args[0]));
    for (i = 0; i < self->n_clear; i++) set_slot(obj, self->clear[i], Py_NewRef(Py_None));
    return obj;
fail:
    Py_DECREF(raws);
    return NULL;
}

static PyObject *cr_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"cls", "fill", "clear", "layout", "units", "read", NULL};
    PyObject *cls, *fill, *clear, *layout, *units, *read = Py_None;
    Py_ssize_t i;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!OO!|O", kwlist, &PyType_Type, &cls, &PyTuple_Type, &fill,
                                     &PyTuple_Type, &clear, &layout, &PyTuple_Type, &units, &read))
        return NULL;
    PyTypeObject *tp = (PyTypeObject *)cls;
    if (tp->tp_new != PyBaseObject_Type.tp_new || tp->tp_itemsize != 0) {
        PyErr_Format(PyExc_TypeError, "CountsReader: %s must be a plain __slots__ class", tp->tp_name);
        return NULL;
    }
    if (PyTuple_GET_SIZE(fill) != CR_FILL || PyTuple_GET_SIZE(clear) > CR_MAX_CLEAR) {
        PyErr_SetString(PyExc_ValueError, "CountsReader: fill names 4 slots, clear at most 8");
        return NULL;
    }
    CountsReader *self = (CountsReader *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = cr_call;
    for (i = 0; i < CR_FILL; i++)
        if (slot_offset(tp, PyTuple_GET_ITEM(fill, i), &self->fill[i]) < 0) goto fail;
    self->n_clear = PyTuple_GET_SIZE(clear);
    for (i = 0; i < self->n_clear; i++)
        if (slot_offset(tp, PyTuple_GET_ITEM(clear, i), &self->clear[i]) < 0) goto fail;
    /* each slot once: set_slot() stores into an empty slot and would leak a second store */
    for (i = 0; i < CR_FILL + self->n_clear; i++) {
        Py_ssize_t a = i < CR_FILL ? self->fill[i] : self->clear[i - CR_FILL];
        for (Py_ssize_t j = 0; j < i; j++) {
            if (a == (j < CR_FILL ? self->fill[j] : self->clear[j - CR_FILL])) {
                PyErr_SetString(PyExc_ValueError, "CountsReader: a slot is named twice");
                goto fail;
            }
        }
    }
    self->n = PyTuple_GET_SIZE(units);
    self->fds = PyMem_New(int, self->n ? self->n : 1);
    self->sizes = PyMem_New(Py_ssize_t, self->n ? self->n : 1);
    if (self->fds == NULL || self->sizes == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (i = 0; i < self->n; i++) {
        PyObject *unit = PyTuple_GET_ITEM(units, i);
        int fd;
        Py_ssize_t size;
        if (!PyTuple_Check(unit)) {
            PyErr_SetString(PyExc_TypeError, "CountsReader: units are (fd, size) pairs");
            goto fail;
        }
        if (!PyArg_ParseTuple(unit, "in;CountsReader: units are (fd, size) pairs", &fd, &size)) goto fail;
        if (size < 0) {
            PyErr_SetString(PyExc_ValueError, "CountsReader: negative read size");
            goto fail;
        }
        self->fds[i] = fd;
        self->sizes[i] = size;
    }
    self->cls = (PyTypeObject *)Py_NewRef(cls);
    self->layout = Py_NewRef(layout);
    self->read = read == Py_None ? NULL : Py_NewRef(read);
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static int cr_traverse(CountsReader *self, visitproc visit, void *arg) {
    Py_VISIT(self->cls);
    Py_VISIT(self->layout);
    Py_VISIT(self->read);
    return 0;
}

static int cr_clear(CountsReader *self) {
    Py_CLEAR(self->cls);
    Py_CLEAR(self->layout);
    Py_CLEAR(self->read);
    return 0;
}

static void cr_dealloc(CountsReader *self) {
    PyObject_GC_UnTrack(self);
    cr_clear(self);
    PyMem_Free(self->fds);
    PyMem_Free(self->sizes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *cr_units(CountsReader *self, void *closure) {
    PyObject *t = PyTuple_New(self->n);
    if (t == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->n; i++) {
        PyObject *u = Py_BuildValue("(in)", self->fds[i], self->sizes[i]);
        if (u == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, u);
    }
    return t;
}

static PyGetSetDef cr_getset[] = {
    {"units", (getter)cr_units, NULL, "the (fd, size) read units, in order", NULL},
    {NULL}};

static PyTypeObject CountsReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pmuscope._native.CountsReader",
    .tp_basicsize = sizeof(CountsReader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "CountsReader(cls, fill, clear, layout, units, read=None): reader(start_ns) -> cls instance",
    .tp_new = cr_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(CountsReader, vectorcall),
    .tp_traverse = (traverseproc)cr_traverse,
    .tp_clear = (inquiry)cr_clear,
    .tp_dealloc = (destructor)cr_dealloc,
    .tp_getset = cr_getset,
};

/* ---- dwarf_unwind: many samples' user stacks with compiled CFI rule rows ----
 *
 * The pure-Python reference is pmuscope.unwind.unwinder.Unwinder.resume(); this
 * loop does the same steps for the rows it can (CFA = register + offset; rules
 * offset/val_offset/undefined/register; the frame-pointer rule) and hands a
 * sample back with a status when it needs a row not in the table (UW_NEED_ROW,
 * `need` = its key) or a row it does not handle (UW_NEED_PY: DWARF expressions).
 *
 * Row layout (int64, UW_ROWW per row): type, cfa_reg, cfa_off, ra, signal,
 * nrules, then (reg, kind, value) x UW_MAXRULES. Keys (sorted): space id << 48 | address;
 * idx[k] is the row of keys[k].
 */
#define UW_ROWW 54
#define UW_MAXRULES 16
#define UW_MAXREGS 64
enum { UW_T_CFI = 0, UW_T_FP = 1, UW_T_NOMAP = 2, UW_T_PY = 3 };
enum { UW_K_OFFSET = 2, UW_K_VAL_OFFSET = 3, UW_K_UNDEF = 1, UW_K_REGISTER = 4 };
enum { UW_DONE = 0, UW_READ = 1, UW_NOCFI = 2, UW_NOMAP = 3, UW_BADCFI = 4, UW_LOOP = 5, UW_MAX = 6,
       UW_NEED_ROW = 10, UW_NEED_PY = 11 };

static inline int uw_read(const uint8_t *stack, uint64_t sp0, int64_t size, uint64_t addr, uint64_t *val) {
    /* perf's access_mem(): [sp0, sp0 + size) less its last byte */
    if (addr < sp0 || size < 9) return 0;
    uint64_t off = addr - sp0;
    if (off > (uint64_t)(size - 9)) return 0;
    memcpy(val, stack + off, 8);
    return 1;
}

static PyObject *py_dwarf_unwind(PyObject *self, PyObject *args) {
    Py_buffer keys_b, idx_b, rows_b, todo_b, sids_b, regs_b, valid_b, act_b, stacks_b, sp0_b, size_b, out_b, nout_b,
        status_b, need_b;
    int nregs, pcn, spn, fpn, lrn, max_stack;
    Py_ssize_t stack_w, out_w;
    unsigned long long pc_mask_arg = ~0ULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*w*y*y*y*w*w*w*w*iiiiiinn|K", &keys_b, &idx_b, &rows_b, &todo_b, &sids_b,
                          &regs_b, &valid_b, &act_b, &stacks_b, &sp0_b, &size_b, &out_b, &nout_b, &status_b,
                          &need_b, &nregs, &pcn, &spn, &fpn, &lrn, &max_stack, &stack_w, &out_w, &pc_mask_arg))
        return NULL;
    const uint64_t pc_mask = (uint64_t)pc_mask_arg;
    const uint64_t *keys = keys_b.buf;
    const int64_t *idx = idx_b.buf;
    const int64_t *rows = rows_b.buf;
    Py_ssize_t nrows = rows_b.len / (UW_ROWW * 8);
    const int64_t *todo = todo_b.buf;
    const int64_t *sids = sids_b.buf;
    uint64_t *regs = regs_b.buf;
    uint64_t *valid = valid_b.buf;
    uint8_t *act = act_b.buf;
    const uint8_t *stacks = stacks_b.buf;
    const uint64_t *sp0s = sp0_b.buf;
    const int64_t *sizes = size_b.buf;
    uint64_t *out = out_b.buf;
    int64_t *nout = nout_b.buf;
    int64_t *status = status_b.buf;
    uint64_t *need = need_b.buf;
    Py_ssize_t nkeys = keys_b.len / 8, ntodo = todo_b.len / 8;
    int ok = nregs > 0 && nregs <= UW_MAXREGS && pcn < nregs && spn < nregs && fpn < nregs && lrn < nregs &&
             idx_b.len == keys_b.len && out_w > 0 && max_stack <= out_w;
    for (Py_ssize_t k = 0; ok && k < nkeys; k++)
        if (idx[k] < 0 || idx[k] >= nrows) ok = 0;
    /* every per-sample buffer holds n samples; every sample named in todo is < n */
    Py_ssize_t n = valid_b.len / 8;
    if (ok && (regs_b.len != n * nregs * 8 || act_b.len != n || sids_b.len != n * 8 || sp0_b.len != n * 8 ||
               size_b.len != n * 8 || nout_b.len != n * 8 || status_b.len != n * 8 || need_b.len != n * 8 ||
               out_b.len != n * out_w * 8 || stack_w < 0 || stacks_b.len != n * stack_w))
        ok = 0;
    for (Py_ssize_t t = 0; ok && t < ntodo; t++)
        if (todo[t] < 0 || todo[t] >= n) ok = 0;
    for (Py_ssize_t t = 0; ok && t < ntodo; t++)
        if (nout[todo[t]] < 0 || nout[todo[t]] > out_w) ok = 0;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "dwarf_unwind: inconsistent arguments");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; t < ntodo; t++) {
        int64_t i = todo[t];
        uint64_t *r = regs + i * nregs;
        uint64_t v = valid[i];
        uint64_t *o = out + i * out_w;
        int64_t n = nout[i];
        const uint8_t *stack = stacks + i * stack_w;
        uint64_t sp0 = sp0s[i];
        int64_t size = sizes[i] < stack_w ? sizes[i] : stack_w;
        uint64_t sid = (uint64_t)sids[i] << 48;
        int activation = act[i];
        int64_t st = UW_DONE;
        uint64_t nr[UW_MAXREGS];
        for (;;) {
            if (n >= max_stack) { st = UW_MAX; break; }
            uint64_t pc = r[pcn];
            uint64_t look = activation ? pc : pc - 1;
            if (look >> 48) { st = UW_NOMAP; break; }
            uint64_t key = sid | look;
            Py_ssize_t lo = 0, hi = nkeys;
            while (lo < hi) {
                Py_ssize_t mid = (lo + hi) >> 1;
                if (keys[mid] < key) lo = mid + 1; else hi = mid;
            }
            if (lo >= nkeys || keys[lo] != key) { st = UW_NEED_ROW; need[i] = key; break; }
            const int64_t *row = rows + idx[lo] * UW_ROWW;
            int64_t type = row[0];
            if (type == UW_T_NOMAP) { st = UW_NOMAP; break; }
            if (type == UW_T_PY) { st = UW_NEED_PY; break; }
            uint64_t nv = v;
            int signal = 0;
            memcpy(nr, r, nregs * 8);
            if (type == UW_T_FP) {
                if (!(v >> fpn & 1) || r[fpn] == 0) { st = UW_NOCFI; break; }
                uint64_t fp = r[fpn], ra, nfp;
                if (!uw_read(stack, sp0, size, fp + 8, &ra)) { st = UW_READ; break; }
                if (!uw_read(stack, sp0, size, fp, &nfp)) { st = UW_READ; break; }
                nr[pcn] = ra; nr[fpn] = nfp; nr[spn] = fp + 16;
                nv |= (1ULL << pcn) | (1ULL << fpn) | (1ULL << spn);
                if (lrn >= 0) { nr[lrn] = ra; nv |= 1ULL << lrn; }
            } else {
                int64_t creg = row[1];
                if (creg < 0 || creg >= nregs || !(v >> creg & 1)) { st = UW_BADCFI; break; }
                uint64_t cfa = r[creg] + (uint64_t)row[2];
                int64_t ra = row[3];
                int64_t nrules = row[5];
                int sp_rule = 0, fail = 0;
                for (int64_t k = 0; k < nrules; k++) {
                    int64_t reg = row[6 + 3 * k], kind = row[7 + 3 * k], val = row[8 + 3 * k];
                    if (reg < 0 || reg >= nregs) continue;
                    if (reg == spn) sp_rule = 1;
                    if (kind == UW_K_OFFSET) {
                        uint64_t x;
                        if (uw_read(stack, sp0, size, cfa + (uint64_t)val, &x)) { nr[reg] = x; nv |= 1ULL << reg; }
                        else if (reg == ra) { fail = 1; break; }
                        else nv &= ~(1ULL << reg);
                    } else if (kind == UW_K_VAL_OFFSET) {
                        nr[reg] = cfa + (uint64_t)val; nv |= 1ULL << reg;
                    } else if (kind == UW_K_UNDEF) {
                        nv &= ~(1ULL << reg);
                    } else if (kind == UW_K_REGISTER) {
                        if (val >= 0 && val < nregs && (v >> val & 1)) { nr[reg] = r[val]; nv |= 1ULL << reg; }
                        else nv &= ~(1ULL << reg);
                    }
                }
                if (fail) { st = UW_READ; break; }
                if (!sp_rule) { nr[spn] = cfa; nv |= 1ULL << spn; }
                if (ra != pcn) {
                    if (ra >= 0 && ra < nregs && (nv >> ra & 1)) { nr[pcn] = nr[ra]; nv |= 1ULL << pcn; }
                    else nv &= ~(1ULL << pcn);
                }
                signal = row[4] != 0;
            }
            nr[pcn] &= pc_mask;
            if (!(nv >> pcn & 1) || nr[pcn] == 0) { st = UW_DONE; break; }
            if (!(nv >> spn & 1) || (nr[pcn] == pc && nr[spn] == r[spn])) { st = UW_LOOP; break; }
            memcpy(r, nr, nregs * 8);
            v = nv;
            o[n++] = signal ? r[pcn] : r[pcn] - 1;
            activation = signal;
        }
        valid[i] = v;
        nout[i] = n;
        act[i] = (uint8_t)activation;
        status[i] = st;
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&keys_b); PyBuffer_Release(&idx_b); PyBuffer_Release(&rows_b); PyBuffer_Release(&todo_b); PyBuffer_Release(&sids_b);
    PyBuffer_Release(&regs_b); PyBuffer_Release(&valid_b); PyBuffer_Release(&act_b); PyBuffer_Release(&stacks_b);
    PyBuffer_Release(&sp0_b); PyBuffer_Release(&size_b); PyBuffer_Release(&out_b); PyBuffer_Release(&nout_b);
    PyBuffer_Release(&status_b); PyBuffer_Release(&need_b);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

/* The false-sharing workload's thread body: n read-modify-writes of one
 * 64-bit word (a volatile pointer: every increment is a load and a store),
 * with the GIL released so threads on different CPUs run at once. */
__attribute__((noinline)) void false_sharing_increment(volatile uint64_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) (*p)++;
}

static PyObject *py_store_loop(PyObject *self, PyObject *args) {
    unsigned long long addr, n;
    if (!PyArg_ParseTuple(args, "KK", &addr, &n)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    false_sharing_increment((volatile uint64_t *)(uintptr_t)addr, (uint64_t)n);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------
 * Record walking and fixed-layout sample decoding (pmuscope.records.native)
 *
 *   next_boundary(data, pos, cut)   byte offset of the first record boundary at or after
 *                                   `cut`, following header.size from `pos` (a boundary);
 *                                   None when a size is < 8, not a multiple of 8 or runs
 *                                   past the data (the numpy reference then decides).
 *   walk_records(buf[, auxtrace_inline])
 *                                   the records of a chunk by following header.size:
 *                                   returns (offsets, sizes, side): the SAMPLE records'
 *                                   offsets and sizes as int64 bytes, side a list of
 *                                   (offset, type, misc, size) of the others; None
 *                                   on anything unusual (truncated header, size < 8, a
 *                                   record past the end, AUXTRACE with inline payloads).
 *   sample_fields(buf, offs, sizes, ops, cols, misc)
 *                                   the fixed-layout fields of SAMPLE records (u64 fields,
 *                                   TID, CPU, CALLCHAIN) into column buffers; returns
 *                                   (callchain bytearray or None, callchain offsets bytearray
 *                                   or None), or None when a field runs past its record.
 * The numpy code in pmuscope.records is the reference; these return None rather than
 * raise, and the caller's numpy path produces the usual FormatError.
 * ------------------------------------------------------------------------------------ */

static PyObject *py_next_boundary(PyObject *self, PyObject *args) {
    Py_buffer b;
    Py_ssize_t pos, cut;
    if (!PyArg_ParseTuple(args, "y*nn", &b, &pos, &cut)) return NULL;
    const unsigned char *d = (const unsigned char *)b.buf;
    Py_ssize_t n = b.len, p = pos;
    int ok = p >= 0 && (p & 7) == 0 && cut <= n;
    while (ok && p < cut) {
        if (p + 8 > n) { ok = 0; break; }
        uint16_t sz;
        memcpy(&sz, d + p + 6, 2);
        if (sz < 8 || (sz & 7) || p + sz > n) { ok = 0; break; }
        p += sz;
    }
    PyBuffer_Release(&b);
    if (!ok) Py_RETURN_NONE;
    return PyLong_FromSsize_t(p);
}

/* run_walk(buf, pos, end, max_run, start, breaks) -> (pos, cut): perf.data reader's run
 * mode (PerfDataFile._walk): follow the headers from `pos` over well-formed records whose
 * type is not marked in `breaks` (256 bytes, one per type below 256), and stop after a
 * record whose size is not a multiple of 8 or that brings the run (from `start`) to
 * `max_run` bytes (cut = 1: the run ends there), or before a record the Python loop must
 * see itself (a break type, a short or oversized header, fewer than 8 bytes left: cut = 0). */
static PyObject *py_run_walk(PyObject *self, PyObject *args) {
    Py_buffer b, br;
    Py_ssize_t pos, end, max_run, start;
    if (!PyArg_ParseTuple(args, "y*nnnny*", &b, &pos, &end, &max_run, &start, &br)) return NULL;
    const unsigned char *d = (const unsigned char *)b.buf;
    const unsigned char *brk = (const unsigned char *)br.buf;
    int cut = 0;
    if (end > b.len) end = b.len;
    if (br.len >= 256 && pos >= 0 && max_run > 0) {
        while (end - pos >= 8) {
            uint32_t type;
            uint16_t sz;
            memcpy(&type, d + pos, 4);
            memcpy(&sz, d + pos + 6, 2);
            if (sz < 8 || sz > end - pos || (type < 256 && brk[type])) break;
            pos += sz;
            if ((sz & 7) || pos - start >= max_run) { cut = 1; break; }
        }
    }
    PyBuffer_Release(&b);
    PyBuffer_Release(&br);
    return Py_BuildValue("(ni)", pos, cut);
}

static PyObject *py_walk_records(PyObject *self, PyObject *args) {
    Py_buffer b;
    int aux_inline = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &b, &aux_inline)) return NULL;
    PyObject *side = NULL, *res = NULL, *ob = NULL, *sb = NULL;
    const unsigned char *d = (const unsigned char *)b.buf;
    Py_ssize_t n = b.len, off = 0, k = 0, cap = 1024;
    /* grown by doubling: a chunk's few thousand offsets stay small heap blocks, not
     * chunk-sized ones the allocator maps and unmaps (a page fault per page touched) */
    int64_t *offs = (int64_t *)PyMem_Malloc(cap * sizeof(int64_t));
    int64_t *sizes = (int64_t *)PyMem_Malloc(cap * sizeof(int64_t));
    if (offs == NULL || sizes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    side = PyList_New(0);
    if (side == NULL) goto done;
    while (off < n) {
        if (n - off < 8) goto bail;
        uint32_t t;
        uint16_t misc, sz;
        memcpy(&t, d + off, 4);
        memcpy(&misc, d + off + 4, 2);
        memcpy(&sz, d + off + 6, 2);
        if (sz < 8 || sz > n - off) goto bail;
        if (t == PERF_RECORD_SAMPLE) {
            if (k == cap) {
                int64_t *o2 = (int64_t *)PyMem_Realloc(offs, 2 * cap * sizeof(int64_t));
                if (o2 == NULL) { PyErr_NoMemory(); goto done; }
                offs = o2;
                int64_t *s2 = (int64_t *)PyMem_Realloc(sizes, 2 * cap * sizeof(int64_t));
                if (s2 == NULL) { PyErr_NoMemory(); goto done; }
                sizes = s2;
                cap *= 2;
            }
            offs[k] = off;
            sizes[k] = sz;
            k++;
        } else {
            if (t == 71 /* PERF_RECORD_AUXTRACE */ && aux_inline) goto bail;
            PyObject *tup = Py_BuildValue("(nkHH)", off, (unsigned long)t, misc, sz);
            if (tup == NULL) goto done;
            int rc = PyList_Append(side, tup);
            Py_DECREF(tup);
            if (rc < 0) goto done;
        }
        off += sz;
    }
    ob = PyBytes_FromStringAndSize((const char *)offs, k * 8);
    sb = PyBytes_FromStringAndSize((const char *)sizes, k * 8);
    if (ob == NULL || sb == NULL) goto done;
    res = PyTuple_Pack(3, ob, sb, side);
    goto done;
bail:
    res = Py_None;
    Py_INCREF(res);
done:
    Py_XDECREF(ob);
    Py_XDECREF(sb);
    Py_XDECREF(side);
    PyMem_Free(offs);
    PyMem_Free(sizes);
    PyBuffer_Release(&b);
    return res;
}

/* ops: one byte per field in record order. 'u': the u64 into the next column (u64),
 * 't': TID, low half into the next column, high half into the one after (int32 each),
 * 'c': CPU, low half into the next column (int32), 'C': CALLCHAIN (nr, then nr u64),
 * 'S': CALLCHAIN skipped (bounds checked, not copied). */
#define SF_MAXCOLS 32
static PyObject *py_sample_fields(PyObject *self, PyObject *args) {
    Py_buffer b, ob, sb, mb, cb[SF_MAXCOLS];
    const char *ops;
    Py_ssize_t nops;
    PyObject *cols, *res = NULL, *chain = NULL, *chain_off = NULL;
    int ncols = 0, got_o = 0, got_s = 0, got_m = 0;
    if (!PyArg_ParseTuple(args, "y*y*y*y#O!w*", &b, &ob, &sb, &ops, &nops, &PyTuple_Type, &cols, &mb))
        return NULL;
    got_o = got_s = got_m = 1;
    Py_ssize_t nc = PyTuple_GET_SIZE(cols);
    if (nc > SF_MAXCOLS) {
        PyErr_SetString(PyExc_ValueError, "sample_fields: too many columns");
        goto done;
    }
    for (; ncols < nc; ncols++)
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(cols, ncols), &cb[ncols], PyBUF_WRITABLE) < 0) goto done;
    const unsigned char *d = (const unsigned char *)b.buf;
    Py_ssize_t n = ob.len / 8, nb = b.len;
    if (sb.len / 8 < n || mb.len / 2 < n) {
        PyErr_SetString(PyExc_ValueError, "sample_fields: buffer sizes do not match");
        goto done;
    }
    const int64_t *offs = (const int64_t *)ob.buf, *sizes = (const int64_t *)sb.buf;
    uint16_t *misc = (uint16_t *)mb.buf;
    int has_chain = memchr(ops, 'C', nops) != NULL;
    /* columns are checked against n once */
    {
        int c = 0;
        for (Py_ssize_t j = 0; j < nops; j++) {
            int need = ops[j] == 't' ? 2 : (ops[j] == 'C' || ops[j] == 'S') ? 0 : 1;
            Py_ssize_t width = ops[j] == 'u' ? 8 : 4;
            for (int q = 0; q < need; q++, c++)
                if (c >= nc || cb[c].len < n * width) {
                    PyErr_SetString(PyExc_ValueError, "sample_fields: columns do not match the ops");
                    goto done;
                }
        }
    }
    uint64_t *cc = NULL;
    int64_t *cco = NULL;
    if (has_chain) {
        chain = PyByteArray_FromStringAndSize(NULL, nb > 0 ? nb : 0);
        chain_off = PyByteArray_FromStringAndSize(NULL, (n + 1) * 8);
        if (chain == NULL || chain_off == NULL) goto done;
        cc = (uint64_t *)PyByteArray_AS_STRING(chain);
        cco = (int64_t *)PyByteArray_AS_STRING(chain_off);
        cco[0] = 0;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t o = offs[i], sz = sizes[i];
        if (o < 0 || sz < 8 || (o & 7) || (sz & 7) || o + sz > nb) goto bail;
        const unsigned char *w = d + o;
        Py_ssize_t p = 1, e = sz / 8;
        uint64_t h, v;
        memcpy(&h, w, 8);
        misc[i] = (uint16_t)(h >> 32);
        int c = 0;
        for (Py_ssize_t j = 0; j < nops; j++) {
            if (p >= e) goto bail;
            memcpy(&v, w + 8 * p, 8);
            p++;
            switch (ops[j]) {
            case 'u':
                ((uint64_t *)cb[c++].buf)[i] = v;
                break;
            case 't':
                ((int32_t *)cb[c++].buf)[i] = (int32_t)(uint32_t)v;
                ((int32_t *)cb[c++].buf)[i] = (int32_t)(uint32_t)(v >> 32);
                break;
            case 'c':
                ((int32_t *)cb[c++].buf)[i] = (int32_t)(uint32_t)v;
                break;
            case 'C':
                if (v > (uint64_t)(e - p)) goto bail;
                memcpy(cc + total, w + 8 * p, v * 8);
                total += (Py_ssize_t)v;
                p += (Py_ssize_t)v;
                break;
            case 'S': /* a call chain the caller does not want: checked, skipped */
                if (v > (uint64_t)(e - p)) goto bail;
                p += (Py_ssize_t)v;
                break;
            default:
                goto bail;
            }
        }
        if (has_chain) cco[i + 1] = total;
    }
    if (has_chain && PyByteArray_Resize(chain, total * 8) < 0) goto done;
    res = Py_BuildValue("(OO)", has_chain ? chain : Py_None, has_chain ? chain_off : Py_None);
    goto done;
bail:
    res = Py_None;
    Py_INCREF(res);
done:
    Py_XDECREF(chain);
    Py_XDECREF(chain_off);
    for (int c = 0; c < ncols; c++) PyBuffer_Release(&cb[c]);
    if (got_o) PyBuffer_Release(&ob);
    if (got_s) PyBuffer_Release(&sb);
    if (got_m) PyBuffer_Release(&mb);
    PyBuffer_Release(&b);
    return res;
}

/* ==== end of record walking ==== */

/* ==== script_text: perf script's text of a batch of samples (pmuscope.profile.script) ====
 *
 * script_text(flags, comm_texts, event_texts, frame_blob, frame_off, comm, pid, tid, cpu,
 *             time, period, event, leaf, stack, stack_offsets, lo, hi[, into]) -> bytes | int | None
 *
 * Samples lo..hi-1 of a Profile's columns (1-d C-contiguous numpy arrays of any integer
 * type; time and period uint64), each as perf script prints it: the header
 * ``comm pid/tid [cpu] secs.usecs: period event: `` (fields by `flags`, the widths of
 * script.py's Python formatter, its reference), then either the call chain (a newline,
 * one frame text per stack entry, a blank line), the leaf frame's text, or nothing (the
 * header as it is, its last space too, and a newline). comm_texts / event_texts: bytes per
 * comm id / event id, padded by the caller; frame_blob + frame_off (int64, nframes + 1):
 * the text of every frame id. Returns None on anything unusual (an id out of range,
 * offsets out of order, an unexpected dtype): the caller formats that batch in Python.
 * With `into` (a bytearray, grown as needed, never shrunk) the text is written at its
 * start and its length returned: a caller writing batch after batch to a file reuses
 * one buffer instead of faulting in fresh pages for every batch's bytes. */

#define ST_COMM 1
#define ST_PID 2
#define ST_TID 4
#define ST_CPU 8
#define ST_TIME 16
#define ST_PERIOD 32
#define ST_EVENT 64
#define ST_FRAMES 128
#define ST_CHAIN 256
#define ST_NS 512

typedef struct {
    Py_buffer view;
    int held;
    int code; /* itemsize, negative for unsigned */
} st_col;

static int st_open(st_col *c, PyObject *obj, Py_ssize_t need) {
    c->held = 0;
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    c->held = 1;
    const char *f = c->view.format ? c->view.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (c->view.ndim != 1 || f[0] == 0 || f[1] != 0) return 0;
    Py_ssize_t sz = c->view.itemsize;
    int sign;
    switch (*f) {
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': sign = 1; break;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': sign = -1; break;
    default: return 0;
    }
    if (sz != 1 && sz != 2 && sz != 4 && sz != 8) return 0;
    if (c->view.len / sz < need) return 0;
    c->code = (int)sz * sign;
    return 1;
}

static void st_close(st_col *c) {
    if (c->held) PyBuffer_Release(&c->view);
    c->held = 0;
}

static inline int64_t st_get(const st_col *c, Py_ssize_t i) {
    const void *p = c->view.buf;
    switch (c->code) {
    case 1: return ((const int8_t *)p)[i];
    case 2: return ((const int16_t *)p)[i];
    case 4: return ((const int32_t *)p)[i];
    case 8: return ((const int64_t *)p)[i];
    case -1: return ((const uint8_t *)p)[i];
    case -2: return ((const uint16_t *)p)[i];
    case -4: return ((const uint32_t *)p)[i];
    default: return (int64_t)((const uint64_t *)p)[i]; /* -8: only for columns checked below */
    }
}

static const char st_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* decimal digits of v, written ending at `end`; returns the first digit's position */
static inline char *st_digits(char *end, uint64_t v) {
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        end -= 2;
        memcpy(end, st_pairs + 2 * r, 2);
    }
    if (v >= 10) {
        end -= 2;
        memcpy(end, st_pairs + 2 * v, 2);
    } else {
        *--end = (char)('0' + v);
    }
    return end;
}

/* Python's f"{v:{width}d}" (right) or f"{v:<{width}d}" (left) or f"{v:0{width}d}" (zero) */
enum { ST_RIGHT, ST_LEFT, ST_ZERO };
static inline char *st_int(char *o, int64_t v, int width, int align) {
    char tmp[24];
    char *end = tmp + sizeof tmp;
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    char *s = st_digits(end, mag);
    int nd = (int)(end - s), len = nd + (v < 0);
    if (align == ST_ZERO) {
        if (v < 0) *o++ = '-';
        for (int k = len; k < width; k++) *o++ = '0';
    } else if (align == ST_RIGHT) {
        for (int k = len; k < width; k++) *o++ = ' ';
        if (v < 0) *o++ = '-';
    } else if (v < 0) {
        *o++ = '-';
    }
    memcpy(o, s, nd);
    o += nd;
    if (align == ST_LEFT)
        for (int k = len; k < width; k++) *o++ = ' ';
    return o;
}

static inline char *st_uint(char *o, uint64_t v, int width) {
    char tmp[24];
    char *end = tmp + sizeof tmp;
    char *s = st_digits(end, v);
    int nd = (int)(end - s);
    for (int k = nd; k < width; k++) *o++ = ' ';
    memcpy(o, s, nd);
    return o + nd;
}

typedef struct {
    const char **ptr;
    Py_ssize_t *len;
    Py_ssize_t n, max;
} st_texts;

static int st_texts_open(st_texts *t, PyObject *list) {
    t->ptr = NULL;
    t->len = NULL;
    t->n = t->max = 0;
    if (!PyList_Check(list)) return 0;
    Py_ssize_t n = PyList_GET_SIZE(list);
    t->ptr = PyMem_Malloc(sizeof(char *) * (size_t)(n + 1));
    t->len = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n + 1));
    if (t->ptr == NULL || t->len == NULL) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyList_GET_ITEM(list, i);
        if (!PyBytes_Check(b)) return 0;
        t->ptr[i] = PyBytes_AS_STRING(b);
        t->len[i] = PyBytes_GET_SIZE(b);
        if (t->len[i] > t->max) t->max = t->len[i];
    }
    t->n = n;
    return 1;
}

static void st_texts_close(st_texts *t) {
    PyMem_Free(t->ptr);
    PyMem_Free(t->len);
}

#define ST_BLOCK 256

/* n values of an integer column from row i0, as int64 */
static void st_load(const st_col *c, Py_ssize_t i0, Py_ssize_t n, int64_t *dst) {
    const char *p = (const char *)c->view.buf;
    switch (c->code) {
#define ST_LOAD(code, type) \
    case code: \
        for (Py_ssize_t k = 0; k < n; k++) dst[k] = (int64_t)((const type *)p)[i0 + k]; \
        break;
        ST_LOAD(1, int8_t)
        ST_LOAD(2, int16_t)
        ST_LOAD(4, int32_t)
        ST_LOAD(8, int64_t)
        ST_LOAD(-1, uint8_t)
        ST_LOAD(-2, uint16_t)
        ST_LOAD(-4, uint32_t)
        ST_LOAD(-8, uint64_t)
#undef ST_LOAD
    }
}

/* memcpy of a short text, inlined: 16-byte moves (the last one overlapping), never
 * reading or writing outside [s, s + n) and [o, o + n) */
static inline void st_copy(char *o, const char *s, size_t n) {
    if (n >= 16) {
        size_t k = 0;
        for (; k + 16 < n; k += 16) memcpy(o + k, s + k, 16);
        memcpy(o + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        memcpy(o, s, 8);
        memcpy(o + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        memcpy(o, s, 4);
        memcpy(o + n - 4, s + n - 4, 4);
    } else if (n) {
        o[0] = s[0];
        o[n / 2] = s[n / 2];
        o[n - 1] = s[n - 1];
    }
}

/* frame id f is in the table and its text inside the blob */
static inline int st_frame_ok(const int64_t *fo, Py_ssize_t nframes, Py_ssize_t blob_len, int64_t f) {
    return f >= 0 && f < nframes && fo[f] >= 0 && fo[f] <= fo[f + 1] && fo[f + 1] <= blob_len;
}


static PyObject *py_script_text(PyObject *self, PyObject *args) {
    int flags;
    PyObject *comm_o, *event_o, *blob_o, *foff_o, *col_o[10], *into = Py_None;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "iOOOOOOOOOOOOOOnn|O", &flags, &comm_o, &event_o, &blob_o, &foff_o, &col_o[0],
                          &col_o[1], &col_o[2], &col_o[3], &col_o[4], &col_o[5], &col_o[6], &col_o[7], &col_o[8],
                          &col_o[9], &lo, &hi, &into))
        return NULL;
    if (into != Py_None && !PyByteArray_Check(into)) {
        PyErr_SetString(PyExc_TypeError, "script_text: into must be a bytearray or None");
        return NULL;
    }
    enum { C_COMM, C_PID, C_TID, C_CPU, C_TIME, C_PERIOD, C_EVENT, C_LEAF, C_STACK, C_SOFF };
    const int want[10] = {flags & ST_COMM, flags & ST_PID, flags & ST_TID, flags & ST_CPU, flags & ST_TIME,
                          flags & ST_PERIOD, flags & ST_EVENT, (flags & ST_FRAMES) && !(flags & ST_CHAIN),
                          (flags & ST_FRAMES) && (flags & ST_CHAIN), (flags & ST_FRAMES) && (flags & ST_CHAIN)};
    st_col col[10], blob, foff;
    st_texts comms, events;
    PyObject *out = NULL;
    char *o = NULL;
    int ok = 1;
    memset(col, 0, sizeof col);
    memset(&blob, 0, sizeof blob);
    memset(&foff, 0, sizeof foff);
    memset(&comms, 0, sizeof comms);
    memset(&events, 0, sizeof events);
    if (lo < 0 || hi < lo) ok = 0;
    for (int k = 0; ok && k < 10; k++)
        if (want[k]) ok = st_open(&col[k], col_o[k], k == C_SOFF ? hi + 1 : (k == C_STACK ? 0 : hi));
    if (ok && (flags & ST_COMM)) ok = st_texts_open(&comms, comm_o);
    if (ok && (flags & ST_EVENT)) ok = st_texts_open(&events, event_o) && events.n > 0;
    if (ok && (flags & ST_TIME)) ok = col[C_TIME].code == -8;
    if (ok && (flags & ST_PERIOD)) ok = col[C_PERIOD].code == -8;
    for (int k = 0; ok && k < 10; k++) /* ids and pids: signed 64-bit at most */
        if (want[k] && k != C_TIME && k != C_PERIOD && col[k].code == -8) ok = 0;
    Py_ssize_t nframes = 0;
    const int64_t *fo = NULL;
    const char *fb = NULL;
    if (ok && (flags & ST_FRAMES)) {
        ok = st_open(&blob, blob_o, 0) && st_open(&foff, foff_o, 1) && foff.code == 8;
        if (ok) {
            nframes = foff.view.len / 8 - 1;
            fo = (const int64_t *)foff.view.buf;
            fb = (const char *)blob.view.buf;
            /* each frame's offsets are checked where a sample uses it (st_frame_ok) */
            ok = nframes >= 0;
        }
    }
    /* the frames' bytes, every id checked */
    Py_ssize_t nstack = ok && want[C_STACK] ? col[C_STACK].view.len / col[C_STACK].view.itemsize : 0;
    size_t frame_bytes = 0;
    if (ok && want[C_STACK]) {
        int64_t a = st_get(&col[C_SOFF], lo), b = st_get(&col[C_SOFF], hi);
        ok = 0 <= a && a <= b && b <= nstack;
        for (Py_ssize_t i = lo; ok && i < hi; i++) ok = st_get(&col[C_SOFF], i) <= st_get(&col[C_SOFF], i + 1);
        for (int64_t k = a; ok && k < b; k++) {
            int64_t f = st_get(&col[C_STACK], k);
            if (!st_frame_ok(fo, nframes, blob.view.len, f)) ok = 0;
            else frame_bytes += (size_t)(fo[f + 1] - fo[f]);
        }
    } else if (ok && want[C_LEAF]) {
        for (Py_ssize_t i = lo; ok && i < hi; i++) {
            int64_t f = st_get(&col[C_LEAF], i);
            if (!st_frame_ok(fo, nframes, blob.view.len, f)) ok = 0;
            else frame_bytes += (size_t)(fo[f + 1] - fo[f]);
        }
    }
    if (!ok) goto done;
    /* the header's numbers take at most 2 * 21 (pid/tid) + 23 ([cpu]) + 30 (time) + 21 (period) bytes */
    size_t cap = frame_bytes + (size_t)(hi - lo) * (size_t)(comms.max + events.max + 160);
    if (into == Py_None) {
        out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap);
        if (out == NULL) goto done;
        o = PyBytes_AS_STRING(out);
    } else {
        /* a buffer kept from batch to batch: its pages are not faulted in again each time */
        if ((size_t)PyByteArray_GET_SIZE(into) < cap && PyByteArray_Resize(into, (Py_ssize_t)cap) < 0) goto done;
        out = into;
        Py_INCREF(out);
        o = PyByteArray_AS_STRING(into);
    }
    char *const start = o;
    /* the columns a block of samples at a time, as int64 (one type switch per block) */
    int64_t v_comm[ST_BLOCK], v_pid[ST_BLOCK], v_tid[ST_BLOCK], v_cpu[ST_BLOCK], v_event[ST_BLOCK], v_leaf[ST_BLOCK];
    const uint64_t *v_time = (flags & ST_TIME) ? (const uint64_t *)col[C_TIME].view.buf : NULL;
    const uint64_t *v_period = (flags & ST_PERIOD) ? (const uint64_t *)col[C_PERIOD].view.buf : NULL;
    for (Py_ssize_t i0 = lo; i0 < hi; i0 += ST_BLOCK) {
        Py_ssize_t nb = hi - i0 < ST_BLOCK ? hi - i0 : ST_BLOCK;
        if (flags & ST_COMM) st_load(&col[C_COMM], i0, nb, v_comm);
        if (flags & ST_PID) st_load(&col[C_PID], i0, nb, v_pid);
        if (flags & ST_TID) st_load(&col[C_TID], i0, nb, v_tid);
        if (flags & ST_CPU) st_load(&col[C_CPU], i0, nb, v_cpu);
        if ((flags & ST_EVENT) && events.n > 1) st_load(&col[C_EVENT], i0, nb, v_event);
        if (want[C_LEAF]) st_load(&col[C_LEAF], i0, nb, v_leaf);
        for (Py_ssize_t j = 0; j < nb; j++) {
            Py_ssize_t i = i0 + j;
            if (flags & ST_COMM) {
                int64_t c = v_comm[j];
                if (c < 0 || c >= comms.n) goto bail;
                st_copy(o, comms.ptr[c], (size_t)comms.len[c]);
                o += comms.len[c];
            }
            if ((flags & ST_PID) && (flags & ST_TID)) {
                o = st_int(o, v_pid[j], 5, ST_RIGHT);
                *o++ = '/';
                o = st_int(o, v_tid[j], 5, ST_LEFT);
                *o++ = ' ';
            } else if (flags & (ST_PID | ST_TID)) {
                o = st_int(o, (flags & ST_PID) ? v_pid[j] : v_tid[j], 5, ST_RIGHT);
                *o++ = ' ';
            }
            if (flags & ST_CPU) {
                *o++ = '[';
                o = st_int(o, v_cpu[j], 3, ST_ZERO);
                *o++ = ']';
                *o++ = ' ';
            }
            if (flags & ST_TIME) {
                if (flags & ST_NS) { /* seconds and nanoseconds: perf script --ns */
                    uint64_t secs = v_time[i] / 1000000000;
                    unsigned frac = (unsigned)(v_time[i] - secs * 1000000000);
                    o = st_uint(o, secs, 5);
                    *o++ = '.';
                    *o++ = (char)('0' + frac / 100000000);
                    frac %= 100000000;
                    for (int d = 0; d < 4; d++) {
                        unsigned div = d == 0 ? 1000000 : d == 1 ? 10000 : d == 2 ? 100 : 1;
                        memcpy(o, st_pairs + 2 * (frac / div % 100), 2);
                        o += 2;
                    }
                } else {
                    uint64_t usec = v_time[i] / 1000;
                    uint64_t secs = usec / 1000000;
                    unsigned frac = (unsigned)(usec - secs * 1000000);
                    o = st_uint(o, secs, 5);
                    *o++ = '.';
                    memcpy(o, st_pairs + 2 * (frac / 10000), 2);
                    memcpy(o + 2, st_pairs + 2 * (frac / 100 % 100), 2);
                    memcpy(o + 4, st_pairs + 2 * (frac % 100), 2);
                    o += 6;
                }
                *o++ = ':';
                *o++ = ' ';
            }
            if (flags & ST_PERIOD) {
                o = st_uint(o, v_period[i], 10);
                *o++ = ' ';
            }
            if (flags & ST_EVENT) {
                int64_t e = events.n == 1 ? 0 : v_event[j];
                if (e < 0 || e >= events.n) goto bail;
                st_copy(o, events.ptr[e], (size_t)events.len[e]);
                o += events.len[e];
            }
            if (want[C_STACK]) {
                *o++ = '\n';
                int64_t a = st_get(&col[C_SOFF], i), b = st_get(&col[C_SOFF], i + 1);
                for (int64_t k = a; k < b; k++) {
                    int64_t f = st_get(&col[C_STACK], k);
                    size_t len = (size_t)(fo[f + 1] - fo[f]);
                    st_copy(o, fb + fo[f], len);
                    o += len;
                }
                *o++ = '\n';
            } else if (want[C_LEAF]) {
                int64_t f = v_leaf[j];
                size_t len = (size_t)(fo[f + 1] - fo[f]);
                st_copy(o, fb + fo[f], len);
                o += len;
            } else {
                *o++ = '\n'; /* the header alone, its last field's space kept (perf's line) */
            }
        }
    }
    if (into != Py_None) {
        Py_DECREF(out);
        out = PyLong_FromSsize_t(o - start);
    } else if (_PyBytes_Resize(&out, (Py_ssize_t)(o - start)) < 0) {
        out = NULL;
    }
    goto done;
bail:
    Py_CLEAR(out);
done:
    for (int k = 0; k < 10; k++) st_close(&col[k]);
    st_close(&blob);
    st_close(&foff);
    st_texts_close(&comms);
    st_texts_close(&events);
    if (out == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return out;
}

/* ==== end of script_text ==== */
/* ---- profile building: per-round call-chain walk and frame cache; collapsing --------------
 *
 * resolve_cache_new() -> capsule
 *     The frame caches of one pmuscope.profile.model.ProfileBuilder, kept across rounds:
 *     user addresses by (space id << 48) | ip, kernel addresses by ip, user "addresses"
 *     >= 2^56 (junk a frame-pointer walk picked up) by ip; pid -> (space id, pid that
 *     resolves for the space) for the pids whose maps did not change since.
 * resolve_cache_clear(cache, what)   what: 0 user frames, 1 kernel frames, 2 junk, 3 pids
 * resolve_cache_forget_pid(cache, pid)
 * resolve_round(cache, ip, cpumode, pid, cc, off, fids, kept, sid_cb, frames_cb) -> entries
 *     ProfileBuilder._resolve's walk and _frames_for's lookups in one pass: each sample's
 *     leaf (ip in the cpumode's space) and its call-chain entries (PERF_CONTEXT_* markers
 *     switch kernel/user and are dropped) get a frame id in `fids` (int32: the n leaves,
 *     then every kept entry in order; `kept`: entries per sample). Unknown pids go to
 *     sid_cb(sorted pids) -> [(sid, rep), ...] (ProfileBuilder._sid, ascending pid order as
 *     the numpy path calls it); addresses seen for the first time go to
 *     frames_cb(kind, pids bytes, ips bytes) -> int64 frame ids, one call per kind (0 user,
 *     1 kernel, 2 junk) with the distinct keys sorted, then kind 3 for user addresses in
 *     [2^48, 2^56) (never cached) in entry order: the numpy path's calls, in its order, so
 *     frame ids come out the same.
 * collapse_new(nkeys[, keep_tid]) -> capsule
 * collapse_add(state, keys, stack, off, period, count, time[, tid])
 *     pmuscope.profile.collapse.Collapser.add: rows told apart by `nkeys` int64 key columns
 *     (n x nkeys, row-major) and the interned call chain (stack int32 between off; None:
 *     chain 0), periods and counts (None: 1 each) summed, each row's first sample's time
 *     (and tid, with keep_tid) kept.
 * collapse_result(state[, final]) -> (key columns, period, count, time, chain frames,
 *     chain offsets, tid or None): buffer objects, rows in the order of their first sample.
 *     final: the state's own memory is handed over (no copy) and the hash tables are freed
 *     first, so taking the rows out does not double the collapser's peak.
 * take_flat(flat, off, sel, mask, itemsize) -> (out, noff) or None
 *     pmuscope.profile.model._take_flat's gather of whole rows (memcpy per row).
 */
#include <stdlib.h>

#define RS_EMPTY INT64_MIN
#define RS_CTX_MAX 0xfffffffffffff001ULL /* (u64)-4095: PERF_CONTEXT_MAX */
#define RS_CTX_HV 0xffffffffffffffe0ULL
#define RS_CTX_KERNEL 0xffffffffffffff80ULL
#define RS_CTX_GUEST_KERNEL 0xfffffffffffff780ULL
#define RS_USER_TOP (1ULL << 48)
#define RS_JUNK (1ULL << 56)

static inline uint64_t rs_mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* u64 -> i64 open-addressing map (RS_EMPTY: free slot) */
typedef struct {
    uint64_t *keys;
    int64_t *vals;
    size_t cap, n;
} rs_map;

static void rs_map_free(rs_map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static int rs_map_alloc(rs_map *m, size_t cap) {
    m->keys = malloc(cap * sizeof(uint64_t));
    m->vals = malloc(cap * sizeof(int64_t));
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        m->keys = NULL;
        m->vals = NULL;
        m->cap = m->n = 0;
        return -1;
    }
    for (size_t i = 0; i < cap; i++) m->vals[i] = RS_EMPTY;
    m->cap = cap;
    m->n = 0;
    return 0;
}

static inline size_t rs_map_slot(const rs_map *m, uint64_t key) {
    size_t mask = m->cap - 1, i = rs_mix(key) & mask;
    while (m->vals[i] != RS_EMPTY && m->keys[i] != key) i = (i + 1) & mask;
    return i;
}

/* room for one more key */
static int rs_map_reserve(rs_map *m) {
    if ((m->n + 1) * 2 <= m->cap) return 0;
    rs_map old = *m;
    if (rs_map_alloc(m, old.cap ? old.cap * 2 : 1024) < 0) {
        *m = old;
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < old.cap; i++)
        if (old.vals[i] != RS_EMPTY) {
            size_t j = rs_map_slot(m, old.keys[i]);
            m->keys[j] = old.keys[i];
            m->vals[j] = old.vals[i];
            m->n++;
        }
    free(old.keys);
    free(old.vals);
    return 0;
}

static inline int64_t rs_map_get(const rs_map *m, uint64_t key) {
    return m->cap ? m->vals[rs_map_slot(m, key)] : RS_EMPTY;
}

static int rs_map_put(rs_map *m, uint64_t key, int64_t val) {
    if (rs_map_reserve(m) < 0) return -1;
    size_t i = rs_map_slot(m, key);
    if (m->vals[i] == RS_EMPTY) {
        m->keys[i] = key;
        m->n++;
    }
    m->vals[i] = val;
    return 0;
}

static void rs_map_clear(rs_map *m) {
    /* a big table is given back rather than wiped */
    if (m->cap > 4096) {
        rs_map_free(m);
        return;
    }
    for (size_t i = 0; i < m->cap; i++) m->vals[i] = RS_EMPTY;
    m->n = 0;
}

/* growable int64 vector */
typedef struct {
    int64_t *a;
    size_t n, cap;
} rs_vec;

static int rs_vec_room(rs_vec *v, size_t more) {
    if (v->n + more <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 256;
    while (cap < v->n + more) cap *= 2;
    int64_t *a = realloc(v->a, cap * sizeof(int64_t));
    if (!a) {
        PyErr_NoMemory();
        return -1;
    }
    v->a = a;
    v->cap = cap;
    return 0;
}

static inline int rs_vec_push(rs_vec *v, int64_t x) {
    if (v->n == v->cap && rs_vec_room(v, 1) < 0) return -1;
    v->a[v->n++] = x;
    return 0;
}

static void rs_vec_free(rs_vec *v) {
    free(v->a);
    memset(v, 0, sizeof *v);
}

typedef struct {
    rs_map tab[3]; /* 0 user (sid << 48 | ip), 1 kernel ip, 2 junk ip */
    rs_map pids;   /* pid -> index into sid / rep */
    rs_vec sid, rep;
} rs_cache;

static void rs_cache_destroy(PyObject *cap) {
    rs_cache *c = PyCapsule_GetPointer(cap, "pmuscope.resolve_cache");
    if (!c) return;
    for (int k = 0; k < 3; k++) rs_map_free(&c->tab[k]);
    rs_map_free(&c->pids);
    rs_vec_free(&c->sid);
    rs_vec_free(&c->rep);
    free(c);
}

static PyObject *py_resolve_cache_new(PyObject *self, PyObject *noargs) {
    rs_cache *c = calloc(1, sizeof *c);
    if (!c) return PyErr_NoMemory();
    PyObject *cap = PyCapsule_New(c, "pmuscope.resolve_cache", rs_cache_destroy);
    if (!cap) free(c);
    return cap;
}

static rs_cache *rs_cache_of(PyObject *cap) {
    return PyCapsule_GetPointer(cap, "pmuscope.resolve_cache");
}

static void rs_cache_clear_pids(rs_cache *c) {
    rs_map_clear(&c->pids);
    c->sid.n = c->rep.n = 0;
}

static PyObject *py_resolve_cache_clear(PyObject *self, PyObject *args) {
    PyObject *cap;
    int what;
    if (!PyArg_ParseTuple(args, "Oi", &cap, &what)) return NULL;
    rs_cache *c = rs_cache_of(cap);
    if (!c) return NULL;
    if (what >= 0 && what < 3)
        rs_map_clear(&c->tab[what]);
    else
        rs_cache_clear_pids(c);
    Py_RETURN_NONE;
}

static PyObject *py_resolve_cache_forget_pid(PyObject *self, PyObject *args) {
    PyObject *cap;
    long long pid;
    if (!PyArg_ParseTuple(args, "OL", &cap, &pid)) return NULL;
    rs_cache *c = rs_cache_of(cap);
    if (!c) return NULL;
    /* open addressing: no deletion; mark the pid's entry stale (sid -1) */
    int64_t at = rs_map_get(&c->pids, (uint64_t)pid);
    if (at != RS_EMPTY) c->sid.a[at] = -1;
    Py_RETURN_NONE;
}

static inline int rs_is_kernel_ctx(uint64_t v) {
    return v == RS_CTX_KERNEL || v == RS_CTX_GUEST_KERNEL || v == RS_CTX_HV;
}

/* cpumodes whose ip is a kernel address (KERNEL=1, HYPERVISOR=3, GUEST_KERNEL=4) */
static const uint8_t rs_kernel_mode[8] = {0, 1, 0, 1, 1, 0, 0, 0};

typedef struct {
    rs_vec key, pid;   /* per distinct missing key */
    rs_vec pos;        /* entries waiting for it (fids holds the miss index meanwhile) */
} rs_miss;

typedef struct {
    rs_cache *c;
    int32_t *fids;
    rs_miss miss[3];
    rs_vec odd_pos, odd_pid, odd_ip;
} rs_round;

/* the frame of one entry, or a note that it waits for one */
static inline int rs_entry(rs_round *r, Py_ssize_t pos, uint64_t v, int kern, int64_t pid, int64_t pidx) {
    int cat;
    uint64_t key;
    int64_t rep = -1;
    if (kern) {
        cat = 1;
        key = v;
        rep = pid;
    } else if (v >= RS_JUNK) {
        cat = 2;
        key = v;
    } else if (v >= RS_USER_TOP) {
        r->fids[pos] = 0;
        if (rs_vec_push(&r->odd_pos, pos) < 0 || rs_vec_push(&r->odd_pid, pid) < 0 ||
            rs_vec_push(&r->odd_ip, (int64_t)v) < 0)
            return -1;
        return 0;
    } else {
        if (pidx < 0 || r->c->sid.a[pidx] < 0) {
            PyErr_SetString(PyExc_RuntimeError, "resolve_round: a pid without a space id");
            return -1;
        }
        cat = 0;
        key = ((uint64_t)r->c->sid.a[pidx] << 48) | v;
        rep = r->c->rep.a[pidx];
    }
    rs_map *m = &r->c->tab[cat];
    if (rs_map_reserve(m) < 0) return -1;
    size_t s = rs_map_slot(m, key);
    int64_t val = m->vals[s];
    if (val >= 0) {
        r->fids[pos] = (int32_t)val;
        return 0;
    }
    rs_miss *ms = &r->miss[cat];
    int64_t midx;
    if (val == RS_EMPTY) {
        midx = (int64_t)ms->key.n;
        m->keys[s] = key;
        m->vals[s] = -1 - midx;
        m->n++;
        if (rs_vec_push(&ms->key, (int64_t)key) < 0 || rs_vec_push(&ms->pid, rep) < 0) return -1;
    } else {
        midx = -1 - val;
    }
    r->fids[pos] = (int32_t)midx;
    return rs_vec_push(&ms->pos, pos);
}

static const int64_t *rs_sort_keys;
static int rs_cmp_idx(const void *a, const void *b) {
    uint64_t x = (uint64_t)rs_sort_keys[*(const int64_t *)a], y = (uint64_t)rs_sort_keys[*(const int64_t *)b];
    return x < y ? -1 : x > y;
}
static int rs_cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* frames_cb(kind, pids, ips) -> m frame ids into out */
static int rs_call_frames(PyObject *cb, int kind, const int64_t *pids, const int64_t *ips, size_t m, int64_t *out) {
    PyObject *pb = PyBytes_FromStringAndSize((const char *)pids, (Py_ssize_t)(m * 8));
    PyObject *ib = PyBytes_FromStringAndSize((const char *)ips, (Py_ssize_t)(m * 8));
    PyObject *res = NULL;
    int ok = -1;
    if (pb && ib) res = PyObject_CallFunction(cb, "iOO", kind, pb, ib);
    Py_XDECREF(pb);
    Py_XDECREF(ib);
    if (!res) return -1;
    Py_buffer b;
    if (PyObject_GetBuffer(res, &b, PyBUF_C_CONTIGUOUS) == 0) {
        if ((size_t)b.len == m * 8 && b.itemsize == 8) {
            memcpy(out, b.buf, m * 8);
            ok = 0;
        } else {
            PyErr_SetString(PyExc_ValueError, "resolve_round: frames_cb must return one int64 id per address");
        }
        PyBuffer_Release(&b);
    }
    Py_DECREF(res);
    return ok;
}

static PyObject *py_resolve_round(PyObject *self, PyObject *args) {
    PyObject *cap, *sid_cb, *frames_cb;
    Py_buffer ip_b, mode_b, pid_b, cc_b, off_b, fid_b, kept_b;
    if (!PyArg_ParseTuple(args, "Oy*y*y*y*y*w*w*OO", &cap, &ip_b, &mode_b, &pid_b, &cc_b, &off_b, &fid_b, &kept_b,
                          &sid_cb, &frames_cb))
        return NULL;
    PyObject *result = NULL;
    rs_round r;
    memset(&r, 0, sizeof r);
    rs_map seen;
    memset(&seen, 0, sizeof seen);
    rs_vec newp = {0}, fidv = {0}, order = {0};
    int dirty = 0; /* provisional entries in the tables */
    rs_cache *c = rs_cache_of(cap);
    if (!c) goto done;
    r.c = c;
    Py_ssize_t n = ip_b.len / 8, m = cc_b.len / 8;
    const uint64_t *ip = ip_b.buf, *cc = cc_b.buf;
    const uint8_t *mode = mode_b.buf;
    const int64_t *pid = pid_b.buf, *off = off_b.buf;
    int64_t *kept = kept_b.buf;
    r.fids = fid_b.buf;
    int ok = mode_b.len == n && pid_b.len == n * 8 && off_b.len == (n + 1) * 8 && kept_b.len == n * 8 &&
             fid_b.len >= (n + m) * 4 && off[0] >= 0 && off[n] <= m;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        if (off[i + 1] < off[i]) ok = 0;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "resolve_round: inconsistent arguments");
        goto done;
    }
    /* pass 1: pids with cached user entries whose space id is not known here, ascending */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = pid[i];
        int64_t at = rs_map_get(&c->pids, (uint64_t)p);
        if (at != RS_EMPTY && c->sid.a[at] >= 0) continue;
        if (rs_map_get(&seen, (uint64_t)p) != RS_EMPTY) continue;
        int ctx = rs_kernel_mode[mode[i] & 7];
        int need = !ctx && ip[i] < RS_USER_TOP;
        for (int64_t j = off[i]; !need && j < off[i + 1]; j++) {
            uint64_t v = cc[j];
            if (v >= RS_CTX_MAX)
                ctx = rs_is_kernel_ctx(v);
            else if (!ctx && v < RS_USER_TOP)
                need = 1;
        }
        if (need && (rs_map_put(&seen, (uint64_t)p, 0) < 0 || rs_vec_push(&newp, p) < 0)) goto done;
    }
    if (newp.n) {
        qsort(newp.a, newp.n, sizeof(int64_t), rs_cmp_i64);
        PyObject *lst = PyList_New((Py_ssize_t)newp.n);
        if (!lst) goto done;
        for (size_t k = 0; k < newp.n; k++) {
            PyObject *v = PyLong_FromLongLong(newp.a[k]);
            if (!v) {
                Py_DECREF(lst);
                goto done;
            }
            PyList_SET_ITEM(lst, (Py_ssize_t)k, v);
        }
        PyObject *res = PyObject_CallOneArg(sid_cb, lst);
        Py_DECREF(lst);
        if (!res) goto done;
        PyObject *seq = PySequence_Fast(res, "resolve_round: sid_cb must return a sequence");
        Py_DECREF(res);
        if (!seq) goto done;
        if ((size_t)PySequence_Fast_GET_SIZE(seq) != newp.n) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "resolve_round: sid_cb must return one (sid, rep) per pid");
            goto done;
        }
        for (size_t k = 0; k < newp.n; k++) {
            long long sid, rep;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)k), "LL", &sid, &rep)) {
                Py_DECREF(seq);
                goto done;
            }
            if (sid < 0 || sid >= (1LL << 16)) {
                Py_DECREF(seq);
                PyErr_SetString(PyExc_ValueError, "resolve_round: space id out of range");
                goto done;
            }
            int64_t at = rs_map_get(&c->pids, (uint64_t)newp.a[k]);
            if (at != RS_EMPTY) {
                c->sid.a[at] = sid;
                c->rep.a[at] = rep;
            } else if (rs_map_put(&c->pids, (uint64_t)newp.a[k], (int64_t)c->sid.n) < 0 ||
                       rs_vec_push(&c->sid, sid) < 0 || rs_vec_push(&c->rep, rep) < 0) {
                Py_DECREF(seq);
                goto done;
            }
        }
        Py_DECREF(seq);
    }
    /* pass 2: leaves, then the call-chain entries, in the numpy path's row order */
    dirty = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int kern = rs_kernel_mode[mode[i] & 7];
        int64_t pidx = -1;
        uint64_t v = ip[i];
        if (!kern && v < RS_USER_TOP) pidx = rs_map_get(&c->pids, (uint64_t)pid[i]);
        if (rs_entry(&r, i, v, kern, pid[i], pidx) < 0) goto done;
    }
    Py_ssize_t pos = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        int ctx = rs_kernel_mode[mode[i] & 7];
        int64_t pidx = -2;
        Py_ssize_t start = pos;
        for (int64_t j = off[i]; j < off[i + 1]; j++) {
            uint64_t v = cc[j];
            if (v >= RS_CTX_MAX) {
                ctx = rs_is_kernel_ctx(v);
                continue;
            }
            if (!ctx && v < RS_USER_TOP && pidx == -2) pidx = rs_map_get(&c->pids, (uint64_t)pid[i]);
            if (rs_entry(&r, pos, v, ctx, pid[i], pidx) < 0) goto done;
            pos++;
        }
        kept[i] = pos - start;
    }
    /* new frames: user, kernel, junk (distinct keys, sorted), then the uncached ones */
    for (int cat = 0; cat < 3; cat++) {
        rs_miss *ms = &r.miss[cat];
        size_t k = ms->key.n;
        if (!k) continue;
        order.n = fidv.n = 0;
        if (rs_vec_room(&order, 3 * k) < 0 || rs_vec_room(&fidv, k) < 0) goto done;
        int64_t *idx = order.a, *pids = order.a + k, *ips = order.a + 2 * k;
        for (size_t q = 0; q < k; q++) idx[q] = (int64_t)q;
        rs_sort_keys = ms->key.a;
        qsort(idx, k, sizeof(int64_t), rs_cmp_idx);
        for (size_t q = 0; q < k; q++) {
            uint64_t key = (uint64_t)ms->key.a[idx[q]];
            pids[q] = cat == 2 ? -1 : ms->pid.a[idx[q]];
            ips[q] = (int64_t)(cat == 0 ? key & (RS_USER_TOP - 1) : key);
        }
        if (rs_call_frames(frames_cb, cat, pids, ips, k, fidv.a) < 0) goto done;
        /* fid of miss index: reuse pids[] */
        for (size_t q = 0; q < k; q++) pids[idx[q]] = fidv.a[q];
        rs_map *tm = &c->tab[cat];
        if (tm->n < k) { /* the callback must not clear the caches */
            PyErr_SetString(PyExc_RuntimeError, "resolve_round: the frame cache was cleared during the round");
            goto done;
        }
        for (size_t q = 0; q < k; q++) tm->vals[rs_map_slot(tm, (uint64_t)ms->key.a[q])] = pids[q];
        for (size_t q = 0; q < ms->pos.n; q++) {
            int64_t at = ms->pos.a[q];
            r.fids[at] = (int32_t)pids[r.fids[at]];
        }
    }
    dirty = 0;
    if (r.odd_pos.n) {
        size_t k = r.odd_pos.n;
        fidv.n = 0;
        if (rs_vec_room(&fidv, k) < 0) goto done;
        if (rs_call_frames(frames_cb, 3, r.odd_pid.a, r.odd_ip.a, k, fidv.a) < 0) goto done;
        for (size_t q = 0; q < k; q++) r.fids[r.odd_pos.a[q]] = (int32_t)fidv.a[q];
    }
    result = PyLong_FromSsize_t(pos);
done:
    if (dirty && c) /* provisional entries left: start the frame caches over (the build failed) */
        for (int k = 0; k < 3; k++) rs_map_clear(&c->tab[k]);
    for (int k = 0; k < 3; k++) {
        rs_vec_free(&r.miss[k].key);
        rs_vec_free(&r.miss[k].pid);
        rs_vec_free(&r.miss[k].pos);
    }
    rs_vec_free(&r.odd_pos);
    rs_vec_free(&r.odd_pid);
    rs_vec_free(&r.odd_ip);
    rs_vec_free(&newp);
    rs_vec_free(&fidv);
    rs_vec_free(&order);
    rs_map_free(&seen);
    PyBuffer_Release(&ip_b);
    PyBuffer_Release(&mode_b);
    PyBuffer_Release(&pid_b);
    PyBuffer_Release(&cc_b);
    PyBuffer_Release(&off_b);
    PyBuffer_Release(&fid_b);
    PyBuffer_Release(&kept_b);
    return result;
}

/* -- collapsing -- */

/* rs_buf: a read-write buffer object owning malloc'd memory (the collapser hands its columns
 * over without copying them; numpy views them with frombuffer) */
typedef struct {
    PyObject_HEAD
    void *p;
    Py_ssize_t len;
} rs_buf;

static int rs_buf_getbuffer(PyObject *o, Py_buffer *view, int flags) {
    rs_buf *b = (rs_buf *)o;
    static char empty[8];
    return PyBuffer_FillInfo(view, o, b->p ? b->p : empty, b->len, 0, flags);
}

static void rs_buf_dealloc(PyObject *o) {
    free(((rs_buf *)o)->p);
    Py_TYPE(o)->tp_free(o);
}

static PyBufferProcs rs_buf_as_buffer = {rs_buf_getbuffer, NULL};

static PyTypeObject RsBufType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pmuscope._native.OwnedBuffer",
    .tp_basicsize = sizeof(rs_buf),
    .tp_dealloc = rs_buf_dealloc,
    .tp_as_buffer = &rs_buf_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory handed over by the C collapser (a buffer: read it with numpy.frombuffer).",
};

/* a buffer object owning p (len bytes; trimmed to its length); p is freed on failure */
static PyObject *rs_buf_adopt(void *p, size_t len) {
    rs_buf *b = PyObject_New(rs_buf, &RsBufType);
    if (!b) {
        free(p);
        return NULL;
    }
    if (p && len) {
        void *q = realloc(p, len);
        if (q) p = q;
    } else {
        free(p);
        p = NULL;
    }
    b->p = p;
    b->len = (Py_ssize_t)len;
    return (PyObject *)b;
}

/* a buffer object holding a copy of len bytes at p */
static PyObject *rs_buf_copy(const void *p, size_t len) {
    void *q = NULL;
    if (len) {
        q = malloc(len);
        if (!q) return PyErr_NoMemory();
        memcpy(q, p, len);
    }
    return rs_buf_adopt(q, len);
}

typedef struct {
    int nk;
    int have_tid; /* the rows keep their first sample's tid (tid is not a key) */
    int done;     /* collapse_result(final=True) took the rows */
    /* chains: frames back to back; table of hash -> chain index */
    int32_t *cfr;
    size_t cfr_n, cfr_cap;
    rs_vec coff;   /* nchains + 1 */
    rs_vec chash;  /* per chain */
    int64_t *ctab; /* slots: chain index or -1 */
    size_t ctab_cap;
    /* rows: nk + 1 keys each (row-major), no stored hash (a grown table hashes the keys
     * again); the table's slots are int32 row numbers */
    rs_vec rkeys;
    rs_vec period, count, time, tid; /* time, tid: of each row's first sample */
    size_t nrows;
    int32_t *rtab;
    size_t rtab_cap;
} rs_coll;

static void rs_coll_free(rs_coll *s) {
    free(s->cfr);
    free(s->ctab);
    free(s->rtab);
    s->cfr = NULL;
    s->ctab = NULL;
    s->rtab = NULL;
    s->cfr_n = s->cfr_cap = s->ctab_cap = s->rtab_cap = s->nrows = 0;
    rs_vec_free(&s->coff);
    rs_vec_free(&s->chash);
    rs_vec_free(&s->rkeys);
    rs_vec_free(&s->period);
    rs_vec_free(&s->count);
    rs_vec_free(&s->time);
    rs_vec_free(&s->tid);
}

static void rs_coll_destroy(PyObject *cap) {
    rs_coll *s = PyCapsule_GetPointer(cap, "pmuscope.collapse");
    if (!s) return;
    rs_coll_free(s);
    free(s);
}

static PyObject *py_collapse_new(PyObject *self, PyObject *args) {
    int nk, have_tid = 1;
    if (!PyArg_ParseTuple(args, "i|p", &nk, &have_tid)) return NULL;
    if (nk < 0 || nk > 64) {
        PyErr_SetString(PyExc_ValueError, "collapse_new: 0..64 key columns");
        return NULL;
    }
    rs_coll *s = calloc(1, sizeof *s);
    if (!s) return PyErr_NoMemory();
    s->nk = nk;
    s->have_tid = have_tid;
    if (rs_vec_push(&s->coff, 0) < 0) {
        free(s);
        return NULL;
    }
    PyObject *cap = PyCapsule_New(s, "pmuscope.collapse", rs_coll_destroy);
    if (!cap) {
        free(s->coff.a);
        free(s);
    }
    return cap;
}

/* slots of `tab` (cap a power of two) hold indexes into hashes[]; grow to keep load <= 1/2 */
static int rs_tab_grow(int64_t **tab, size_t *cap, size_t n, const int64_t *hashes) {
    if ((n + 1) * 2 <= *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 1024;
    int64_t *t = malloc(nc * sizeof(int64_t));
    if (!t) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < nc; i++) t[i] = -1;
    for (size_t k = 0; k < n; k++) {
        size_t i = (size_t)hashes[k] & (nc - 1);
        while (t[i] >= 0) i = (i + 1) & (nc - 1);
        t[i] = (int64_t)k;
    }
    free(*tab);
    *tab = t;
    *cap = nc;
    return 0;
}

static int64_t rs_intern_chain(rs_coll *s, const int32_t *fr, int64_t len) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)len;
    for (int64_t j = 0; j < len; j++) h = (h ^ (uint32_t)fr[j]) * 0x100000001b3ULL + (h >> 29);
    h = rs_mix(h);
    size_t nch = s->chash.n;
    if (rs_tab_grow(&s->ctab, &s->ctab_cap, nch, s->chash.a) < 0) return -1;
    size_t mask = s->ctab_cap - 1, i = h & mask;
    for (;;) {
        int64_t k = s->ctab[i];
        if (k < 0) break;
        if ((uint64_t)s->chash.a[k] == h) {
            int64_t a = s->coff.a[k], b = s->coff.a[k + 1];
            if (b - a == len && memcmp(s->cfr + a, fr, (size_t)len * 4) == 0) return k;
        }
        i = (i + 1) & mask;
    }
    if (s->cfr_n + (size_t)len > s->cfr_cap) {
        size_t nc = s->cfr_cap ? s->cfr_cap : 4096;
        while (nc < s->cfr_n + (size_t)len) nc *= 2;
        int32_t *a = realloc(s->cfr, nc * 4);
        if (!a) {
            PyErr_NoMemory();
            return -1;
        }
        s->cfr = a;
        s->cfr_cap = nc;
    }
    memcpy(s->cfr + s->cfr_n, fr, (size_t)len * 4);
    s->cfr_n += (size_t)len;
    if (rs_vec_push(&s->coff, (int64_t)s->cfr_n) < 0 || rs_vec_push(&s->chash, (int64_t)h) < 0) return -1;
    s->ctab[i] = (int64_t)nch;
    return (int64_t)nch;
}

static inline uint64_t rs_row_hash(const int64_t *row, int w) {
    uint64_t h = 0xC2B2AE3D27D4EB4FULL;
    for (int k = 0; k < w; k++) h = (h ^ (uint64_t)row[k]) * 0x9E3779B97F4A7C15ULL + (h >> 31);
    return rs_mix(h);
}

/* the rows' table grown to keep its load <= 1/2 (slots: row number or -1) */
static int rs_rows_grow(rs_coll *s) {
    size_t n = s->nrows;
    if ((n + 1) * 2 <= s->rtab_cap) return 0;
    if (n >= INT32_MAX / 2) {
        PyErr_SetString(PyExc_OverflowError, "collapse_add: more than 2^30 distinct rows");
        return -1;
    }
    size_t nc = s->rtab_cap ? s->rtab_cap * 2 : 1024;
    int32_t *t = malloc(nc * sizeof(int32_t));
    if (!t) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < nc; i++) t[i] = -1;
    int w = s->nk + 1;
    for (size_t k = 0; k < n; k++) {
        size_t i = rs_row_hash(s->rkeys.a + k * w, w) & (nc - 1);
        while (t[i] >= 0) i = (i + 1) & (nc - 1);
        t[i] = (int32_t)k;
    }
    free(s->rtab);
    s->rtab = t;
    s->rtab_cap = nc;
    return 0;
}

static PyObject *py_collapse_add(PyObject *self, PyObject *args) {
    PyObject *cap, *stack_o, *count_o, *tid_o = Py_None;
    Py_buffer keys_b, off_b, period_b, time_b, stack_b = {0}, count_b = {0}, tid_b = {0};
    if (!PyArg_ParseTuple(args, "Oy*Oy*y*Oy*|O", &cap, &keys_b, &stack_o, &off_b, &period_b, &count_o, &time_b,
                          &tid_o))
        return NULL;
    PyObject *result = NULL;
    int have_stack = 0, have_count = 0, have_tid = 0;
    rs_coll *s = PyCapsule_GetPointer(cap, "pmuscope.collapse");
    if (!s) goto done;
    if (s->done) {
        PyErr_SetString(PyExc_ValueError, "collapse_add: the rows were taken (collapse_result final)");
        goto done;
    }
    if (stack_o != Py_None) {
        if (PyObject_GetBuffer(stack_o, &stack_b, PyBUF_C_CONTIGUOUS) < 0) goto done;
        have_stack = 1;
    }
    if (count_o != Py_None) {
        if (PyObject_GetBuffer(count_o, &count_b, PyBUF_C_CONTIGUOUS) < 0) goto done;
        have_count = 1;
    }
    if (tid_o != Py_None) {
        if (PyObject_GetBuffer(tid_o, &tid_b, PyBUF_C_CONTIGUOUS) < 0) goto done;
        have_tid = 1;
    }
    int nk = s->nk, w = nk + 1;
    Py_ssize_t n = period_b.len / 8;
    const int64_t *keys = keys_b.buf, *off = off_b.buf, *count = have_count ? count_b.buf : NULL;
    const uint64_t *period = period_b.buf, *time = time_b.buf;
    const int32_t *stack = have_stack ? stack_b.buf : NULL;
    Py_ssize_t m = have_stack ? stack_b.len / 4 : 0;
    const int64_t *tid = have_tid ? tid_b.buf : NULL;
    int ok = keys_b.len == n * nk * 8 && time_b.len == n * 8 && (!have_count || count_b.len == n * 8) &&
             (!have_tid || tid_b.len == n * 8) && (have_tid || !s->have_tid) &&
             (!have_stack || (off_b.len == (n + 1) * 8 && off[0] >= 0 && off[n] <= m));
    for (Py_ssize_t i = 0; ok && have_stack && i < n; i++)
        if (off[i + 1] < off[i]) ok = 0;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "collapse_add: inconsistent arguments");
        goto done;
    }
    /* rows are kept in the order of their first sample: its number is not needed */
    int64_t row[65];
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(row, keys + i * nk, (size_t)nk * 8);
        row[nk] = 0;
        if (have_stack) {
            int64_t ch = rs_intern_chain(s, stack + off[i], off[i + 1] - off[i]);
            if (ch < 0) goto done;
            row[nk] = ch;
        }
        uint64_t h = rs_row_hash(row, w);
        if (rs_rows_grow(s) < 0) goto done;
        size_t mask = s->rtab_cap - 1, j = h & mask;
        int64_t found = -1;
        for (;;) {
            int32_t k = s->rtab[j];
            if (k < 0) break;
            if (memcmp(s->rkeys.a + (size_t)k * w, row, (size_t)w * 8) == 0) {
                found = k;
                break;
            }
            j = (j + 1) & mask;
        }
        int64_t cnt = count ? count[i] : 1;
        if (found >= 0) {
            s->period.a[found] = (int64_t)((uint64_t)s->period.a[found] + period[i]);
            s->count.a[found] += cnt;
            continue;
        }
        if (rs_vec_room(&s->rkeys, (size_t)w) < 0) goto done;
        memcpy(s->rkeys.a + s->rkeys.n, row, (size_t)w * 8);
        s->rkeys.n += (size_t)w;
        if (rs_vec_push(&s->period, (int64_t)period[i]) < 0 || rs_vec_push(&s->count, cnt) < 0 ||
            rs_vec_push(&s->time, (int64_t)time[i]) < 0 || (s->have_tid && rs_vec_push(&s->tid, tid[i]) < 0))
            goto done;
        s->rtab[j] = (int32_t)s->nrows++;
    }
    result = Py_NewRef(Py_None);
done:
    if (have_stack) PyBuffer_Release(&stack_b);
    if (have_count) PyBuffer_Release(&count_b);
    if (have_tid) PyBuffer_Release(&tid_b);
    PyBuffer_Release(&keys_b);
    PyBuffer_Release(&off_b);
    PyBuffer_Release(&period_b);
    PyBuffer_Release(&time_b);
    return result;
}

/* a vector's items as a buffer object: handed over (the vector is left empty) or copied */
static PyObject *rs_vec_out(rs_vec *v, int take) {
    if (!take) return rs_buf_copy(v->a, v->n * 8);
    PyObject *o = rs_buf_adopt(v->a, v->n * 8);
    memset(v, 0, sizeof *v);
    return o;
}

static PyObject *py_collapse_result(PyObject *self, PyObject *args) {
    PyObject *cap;
    int final = 0;
    if (!PyArg_ParseTuple(args, "O|p", &cap, &final)) return NULL;
    rs_coll *s = PyCapsule_GetPointer(cap, "pmuscope.collapse");
    if (!s) return NULL;
    if (s->done) {
        PyErr_SetString(PyExc_ValueError, "collapse_result: the rows were taken (collapse_result final)");
        return NULL;
    }
    size_t n = s->nrows;
    int w = s->nk + 1;
    PyObject *keys = PyTuple_New(w), *out = NULL;
    if (!keys) return NULL;
    if (final) { /* the tables go first: the columns are made in the room they leave */
        free(s->rtab);
        free(s->ctab);
        s->rtab = NULL;
        s->ctab = NULL;
        s->rtab_cap = s->ctab_cap = 0;
        rs_vec_free(&s->chash);
    }
    for (int k = 0; k < w; k++) { /* row-major keys to one column each */
        int64_t *col = malloc(n ? n * 8 : 1);
        if (!col) {
            PyErr_NoMemory();
            goto fail;
        }
        for (size_t i = 0; i < n; i++) col[i] = s->rkeys.a[i * w + k];
        PyObject *o = rs_buf_adopt(col, n * 8);
        if (!o) goto fail;
        PyTuple_SET_ITEM(keys, k, o);
    }
    if (final) rs_vec_free(&s->rkeys);
    PyObject *tid = s->have_tid ? rs_vec_out(&s->tid, final) : Py_NewRef(Py_None);
    PyObject *frames;
    if (final) {
        frames = rs_buf_adopt(s->cfr, s->cfr_n * 4);
        s->cfr = NULL;
        s->cfr_n = s->cfr_cap = 0;
    } else {
        frames = rs_buf_copy(s->cfr, s->cfr_n * 4);
    }
    out = Py_BuildValue("(NNNNNNN)", keys, rs_vec_out(&s->period, final),
                        rs_vec_out(&s->count, final), rs_vec_out(&s->time, final), frames,
                        rs_vec_out(&s->coff, final), tid);
    keys = NULL; /* Py_BuildValue's N took it, whether or not it succeeded */
    if (final) {
        rs_coll_free(s);
        s->done = 1;
    }
    return out;
fail:
    Py_XDECREF(keys);
    if (final) { /* the tables are gone: the state cannot take more rows */
        rs_coll_free(s);
        s->done = 1;
    }
    return NULL;
}

/* take_flat(flat, off, sel, mask, itemsize) -> (out, noff) bytearrays, or None when the
 * arguments do not fit (the caller then takes the numpy path): rows `sel` (a bool mask
 * when `mask`, else int64 row numbers) of a flat + offsets field, back to back. */
static PyObject *py_take_flat(PyObject *self, PyObject *args) {
    Py_buffer flat_b, off_b, sel_b;
    int mask;
    Py_ssize_t isz;
    if (!PyArg_ParseTuple(args, "y*y*y*pn", &flat_b, &off_b, &sel_b, &mask, &isz)) return NULL;
    PyObject *result = NULL, *out = NULL, *noff_o = NULL;
    const int64_t *off = off_b.buf;
    Py_ssize_t nsrc = off_b.len / 8 - 1, k = 0, nflat = isz > 0 ? flat_b.len / isz : -1;
    const uint8_t *m = sel_b.buf;
    const int64_t *idx = sel_b.buf;
    int ok = nsrc >= 0 && isz > 0 && off_b.len % 8 == 0 && (mask ? sel_b.len == nsrc : sel_b.len % 8 == 0);
    int64_t total = 0;
    if (ok) {
        Py_ssize_t n = mask ? nsrc : sel_b.len / 8;
        for (Py_ssize_t i = 0; ok && i < n; i++) {
            int64_t r;
            if (mask) {
                if (!m[i]) continue;
                r = i;
            } else {
                r = idx[i];
            }
            if (r < 0 || r >= nsrc || off[r] < 0 || off[r + 1] < off[r] || off[r + 1] > nflat)
                ok = 0;
            else {
                total += off[r + 1] - off[r];
                k++;
            }
        }
    }
    if (!ok) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(total * isz));
    noff_o = PyByteArray_FromStringAndSize(NULL, (k + 1) * 8);
    if (!out || !noff_o) goto done;
    {
        char *dst = PyByteArray_AS_STRING(out);
        const char *src = flat_b.buf;
        int64_t *noff = (int64_t *)PyByteArray_AS_STRING(noff_o);
        Py_ssize_t n = mask ? nsrc : sel_b.len / 8, j = 0;
        int64_t at = 0;
        noff[0] = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t r;
            if (mask) {
                if (!m[i]) continue;
                r = i;
            } else {
                r = idx[i];
            }
            int64_t len = off[r + 1] - off[r];
            memcpy(dst + at * isz, src + off[r] * isz, (size_t)(len * isz));
            at += len;
            noff[++j] = at;
        }
    }
    result = PyTuple_Pack(2, out, noff_o);
done:
    Py_XDECREF(out);
    Py_XDECREF(noff_o);
    PyBuffer_Release(&flat_b);
    PyBuffer_Release(&off_b);
    PyBuffer_Release(&sel_b);
    return result;
}
/* ---- end of profile building ---- */

static PyMethodDef methods[] = {
    {"store_loop", py_store_loop, METH_VARARGS,
     "store_loop(address, n): increment the u64 at address n times, without the GIL."},
    {"rdtsc", py_rdtsc, METH_NOARGS, "Read the time-stamp counter (x86 TSC, arm64 CNTVCT_EL0)."},
    {"rdpmc", py_rdpmc, METH_O, "rdpmc(counter): x86 user-space counter read; counter = page.index - 1."},
    {"mmap_read", py_mmap_read, METH_O, "mmap_read(page_address) -> (count, enabled, running) or None."},
    {"sample_loop", py_sample_loop, METH_VARARGS,
     "sample_loop(fds, size, n, period_ns, stamps, data[, start, slot, slots, spin_ns]) -> (taken, late, slot, start)."},
    {"dwarf_unwind", py_dwarf_unwind, METH_VARARGS,
     "dwarf_unwind(keys, idx, rows, todo, sids, regs, valid, act, stacks, sp0, size, out, nout, status, need, "
     "nregs, pc, sp, fp, lr, max_stack, stack_width, out_width[, pc_mask]): unwind samples `todo` "
     "(see pmuscope.unwind.batch)."},
    {"monitor_loop", py_monitor_loop, METH_VARARGS,
     "monitor_loop(plan, buf, rec, ts, idx, late, skipped, i, n, k, start, interval, tolerance, last, "
     "ctx_every, ctx_state, alive_every, stop[, clock]) -> (i, k, flags): pmuscope monitor's sampling loop."},
    {"next_boundary", py_next_boundary, METH_VARARGS,
     "next_boundary(data, pos, cut) -> first record boundary >= cut, or None (see pmuscope.records.native)."},
    {"run_walk", py_run_walk, METH_VARARGS,
     "run_walk(buf, pos, end, max_run, start, breaks) -> (pos, cut): the perf.data reader's runs of records."},
    {"walk_records", py_walk_records, METH_VARARGS,
     "walk_records(buf[, auxtrace_inline]) -> (offsets, sizes, side) or None (see pmuscope.records.native)."},
    {"sample_fields", py_sample_fields, METH_VARARGS,
     "sample_fields(buf, offs, sizes, ops, cols, misc) -> (callchain, callchain_offsets) or None "
     "(see pmuscope.records.native)."},
    {"script_text", py_script_text, METH_VARARGS,
     "script_text(flags, comm_texts, event_texts, frame_blob, frame_off, comm, pid, tid, cpu, time, period, "
     "event, leaf, stack, stack_offsets, lo, hi[, into]) -> bytes, length written into `into`, or None: "
     "perf script text of samples lo..hi-1."},
    {"resolve_cache_new", py_resolve_cache_new, METH_NOARGS, "resolve_cache_new() -> the frame caches of a profile builder."},
    {"resolve_cache_clear", py_resolve_cache_clear, METH_VARARGS,
     "resolve_cache_clear(cache, what): forget user (0), kernel (1), junk (2) frames or the pids' space ids (3)."},
    {"resolve_cache_forget_pid", py_resolve_cache_forget_pid, METH_VARARGS,
     "resolve_cache_forget_pid(cache, pid): the pid's maps changed."},
    {"resolve_round", py_resolve_round, METH_VARARGS,
     "resolve_round(cache, ip, cpumode, pid, cc, off, fids, kept, sid_cb, frames_cb) -> entries written."},
    {"take_flat", py_take_flat, METH_VARARGS,
     "take_flat(flat, off, sel, mask, itemsize) -> (out, noff) or None: rows of a flat + offsets field."},
    {"collapse_new", py_collapse_new, METH_VARARGS,
     "collapse_new(nkeys[, keep_tid=True]) -> collapsing state (keep_tid: rows keep their first sample's tid)."},
    {"collapse_add", py_collapse_add, METH_VARARGS,
     "collapse_add(state, keys, stack, off, period, count, time[, tid]): collapse one chunk."},
    {"collapse_result", py_collapse_result, METH_VARARGS,
     "collapse_result(state[, final]) -> (key columns, period, count, time, chain frames, chain offsets, "
     "tid or None): buffers; final hands the C memory over and frees the state."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&CountsReaderType) < 0 || PyType_Ready(&RsBufType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "HAVE_RDPMC", HAVE_RDPMC) < 0 ||
        PyModule_AddIntConstant(m, "SAMPLE_LOOP_MAX_FDS", SL_MAX_FDS) < 0 ||
        PyModule_AddObjectRef(m, "CountsReader", (PyObject *)&CountsReaderType) < 0 ||
        PyModule_AddObjectRef(m, "OwnedBuffer", (PyObject *)&RsBufType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
