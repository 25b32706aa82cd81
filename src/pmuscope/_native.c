/*
 * pmuscope._native: the few things Python cannot do at SHIM speed.
 *
 *   rdtsc()                      x86 TSC / arm64 CNTVCT_EL0
 *   rdpmc(index)                 x86 user-space counter read (index = mmap page index - 1)
 *   mmap_read(addr)              the kernel's self-monitoring seqlock protocol over a
 *                                perf_event_mmap_page (include/uapi/linux/perf_event.h),
 *                                returns (count, enabled, running) or None when the
 *                                counter is not readable from user space (index == 0)
 *   sample_loop(fd, size, n, period_ns, stamps, data)
 *                                read(fd) n times at a fixed rate, bracketing each read by
 *                                two CLOCK_MONOTONIC_RAW stamps; fills two writable buffers
 *                                (stamps: 2*n u64, data: n*size bytes); GIL released.
 *
 * The pure-Python implementations in pmuscope.observe are the reference; this module is
 * optional and tested against them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>
#include <linux/perf_event.h>

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

static PyObject *py_sample_loop(PyObject *self, PyObject *args) {
    int fd;
    Py_ssize_t size, n;
    unsigned long long period_ns;
    Py_buffer stamps, data;
    if (!PyArg_ParseTuple(args, "innKw*w*", &fd, &size, &n, &period_ns, &stamps, &data)) return NULL;
    if (stamps.len < (Py_ssize_t)(2 * n * sizeof(uint64_t)) || data.len < n * size) {
        PyBuffer_Release(&stamps);
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "sample_loop: output buffers too small for n samples");
        return NULL;
    }
    uint64_t *st = (uint64_t *)stamps.buf;
    char *out = (char *)data.buf;
    Py_ssize_t i, taken = 0, late = 0;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    uint64_t start = now_mono();
    for (i = 0; i < n; i++) {
        uint64_t deadline = start + (uint64_t)i * period_ns;
        uint64_t t = now_mono();
        if (t < deadline) {
            uint64_t wait = deadline - t;
            if (wait > 60000) { /* sleep for waits above 60 us, spin below */
                struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
            }
            while (now_mono() < deadline) ;
        } else if (i && t - deadline > period_ns) {
            late++;
        }
        st[2 * i] = now_raw();
        ssize_t r = read(fd, out + i * size, (size_t)size);
        st[2 * i + 1] = now_raw();
        if (r != size) { err = r < 0 ? errno : EIO; break; }
        taken++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&stamps);
    PyBuffer_Release(&data);
    if (err && taken == 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("(nn)", taken, late);
}

static PyMethodDef methods[] = {
    {"rdtsc", py_rdtsc, METH_NOARGS, "Read the time-stamp counter (x86 TSC, arm64 CNTVCT_EL0)."},
    {"rdpmc", py_rdpmc, METH_O, "rdpmc(counter): x86 user-space counter read; counter = page.index - 1."},
    {"mmap_read", py_mmap_read, METH_O, "mmap_read(page_address) -> (count, enabled, running) or None."},
    {"sample_loop", py_sample_loop, METH_VARARGS,
     "sample_loop(fd, size, n, period_ns, stamps, data) -> (taken, late)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (m) PyModule_AddIntConstant(m, "HAVE_RDPMC", HAVE_RDPMC);
    return m;
}
