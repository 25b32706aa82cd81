/*
 * pmuscope._pyperf: Python function names for perf on CPython 3.9 - 3.11.
 *
 * CPython 3.12 added `-X perf` (Python/perf_trampoline.c): every Python
 * function is evaluated through a tiny piece of machine code of its own, and
 * the interpreter writes /tmp/perf-PID.map naming that code "py::QUALNAME:FILE".
 * A sampled stack then holds, between the C frames of the evaluation loop, a
 * return address inside the function's own trampoline, which perf (and
 * pmuscope) name through the map.
 *
 * This module gives older interpreters the same mechanism through the
 * frame-evaluation hook of PEP 523: `activate()` installs an evaluator that
 * looks up (or creates) the code object's trampoline and calls
 *     trampoline(tstate, frame, throw, _PyEval_EvalFrameDefault)
 * which keeps a frame-pointer frame and calls the real evaluator.
 *
 * why a hook costs more than a call: 3.11's ceval inlines a Python-to-Python
 * call only while no eval function is set (ceval.c, CALL and the
 * CALL_PY_* specializations check `tstate->interp->eval_frame == NULL`), so
 * with the hook every Python call gets its own C frame -- which is exactly what
 * puts it on the C stack.
 */
#define _GNU_SOURCE 1  /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#  define PYPERF_311 1
#  ifndef Py_BUILD_CORE
#    define Py_BUILD_CORE 1
#  endif
#  include "internal/pycore_frame.h"
typedef struct _PyInterpreterFrame eval_frame_t;
#  define FRAME_CODE(f) ((f)->f_code)
#elif PY_VERSION_HEX >= 0x03090000 && PY_VERSION_HEX < 0x030B0000
#  define PYPERF_OLD 1
#  include <frameobject.h>
typedef PyFrameObject eval_frame_t;
#  define FRAME_CODE(f) ((f)->f_code)
#endif

#if defined(PYPERF_311) || defined(PYPERF_OLD)
#  define PYPERF_SUPPORTED 1
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef PYPERF_SUPPORTED

typedef PyObject *(*eval_func_t)(PyThreadState *, eval_frame_t *, int);
typedef PyObject *(*trampoline_t)(PyThreadState *, eval_frame_t *, int, eval_func_t);

/* The trampoline: a frame-pointer frame around a call of its 4th argument.
 * why the frame pointer: the code has no CFI, and unwinders that fall back to
 * the frame-pointer rule for such code (pmuscope's, libdw's) step through it;
 * the evaluator it calls restores %rbp/x29 through its own CFI. perf's
 * libunwind-based unwinder does not fall back: the jitdump below is for it. */
#if defined(__x86_64__)
static const unsigned char tramp_code[] = {
    0x55,             /* push %rbp        */
    0x48, 0x89, 0xe5, /* mov  %rsp,%rbp   */
    0xff, 0xd1,       /* call *%rcx       */
    0x5d,             /* pop  %rbp        */
    0xc3,             /* ret              */
};
#elif defined(__aarch64__)
static const unsigned int tramp_code[] = {
    0xa9bf7bfd,       /* stp x29, x30, [sp, #-16]! */
    0x910003fd,       /* mov x29, sp               */
    0xd63f0060,       /* blr x3                    */
    0xa8c17bfd,       /* ldp x29, x30, [sp], #16   */
    0xd65f03c0,       /* ret                       */
};
#else
#  define PYPERF_NO_TRAMPOLINE 1
#endif

/* bytes per trampoline (code padded with traps); with a jitdump, room for the
 * unwind info perf inject places after each function's code (see jit_entry) */
#define SLOT_MAP (sizeof(tramp_code) <= 16 ? 16 : 32)
#define SLOT_JIT 128
static size_t slot_size = SLOT_MAP;
#define ARENA_SIZE (64 * 1024)        /* trampolines are carved out of arenas of this size */

static char *arena_next = NULL;       /* next free slot in the current arena */
static char *arena_end = NULL;
static Py_ssize_t extra_index = -1;   /* code-object extra slot holding the trampoline */
static int active = 0;
static int map_fd = -1;
static pid_t map_pid = 0;             /* the process map_fd was opened for */
static char map_dir[256] = "/tmp";
static unsigned long n_trampolines = 0;
static int write_errors = 0;

/* every map line written, so a forked child can start its own map with them */
static char *lines = NULL;
static size_t lines_len = 0, lines_cap = 0;

static int
new_arena(void)
{
    char *mem = mmap(NULL, ARENA_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        return -1;
    }
    for (size_t off = 0; off + slot_size <= ARENA_SIZE; off += slot_size) {
        memset(mem + off, 0, slot_size);
#if defined(__x86_64__)
        memset(mem + off, 0xcc, slot_size);  /* int3 padding */
#endif
        memcpy(mem + off, tramp_code, sizeof(tramp_code));
    }
    /* why mprotect rather than mapping RWX: W^X; and the kernel reports the
     * new executable mapping to perf (PERF_RECORD_MMAP) when exec is added */
    if (mprotect(mem, ARENA_SIZE, PROT_READ | PROT_EXEC) != 0) {
        munmap(mem, ARENA_SIZE);
        return -1;
    }
    __builtin___clear_cache(mem, mem + ARENA_SIZE);
    arena_next = mem;
    arena_end = mem + ARENA_SIZE;
    return 0;
}

static int
open_map(int truncate)
{
    char path[320];
    snprintf(path, sizeof(path), "%s/perf-%ld.map", map_dir, (long)getpid());
    /* why O_NOFOLLOW and the owner check: /tmp is shared; never write through a
     * link someone planted, nor append to a file another user owns (perf also
     * refuses maps not owned by the reading user or root) */
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    /* a map left by an earlier process with the same pid would name our
     * addresses after its functions: start empty (only once the file is
     * known to be ours) */
    if (truncate && ftruncate(fd, 0) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void
write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            write_errors++;
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

/* ---- jitdump (tools/perf/Documentation/jitdump-specification.txt) -------------
 * Optional: `perf inject --jit` turns /tmp/jit-PID.dump into one small ELF per
 * trampoline with its code, name and CFI, so perf's DWARF unwinder (libunwind,
 * which does not fall back to frame pointers for code it has no ELF for) steps
 * through Python frames too. The perf map stays the source of names for
 * everything else. x86-64 only. */
#if defined(__x86_64__)
#  define PYPERF_JITDUMP 1
#  include <time.h>
#  include <sys/syscall.h>

#define JIT_CODE_SIZE 16   /* the trampoline and its int3 padding */

static int jitdump_on = 0;
static int jit_fd = -1;
static pid_t jit_pid = 0;
static void *jit_marker = NULL;
static long jit_marker_size = 0;
static uint64_t jit_code_id = 0;
static uint64_t jit_salt = 0;

static uint64_t
mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  /* perf record -k 1 samples on this clock */
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void
put32(unsigned char **p, uint32_t v) { memcpy(*p, &v, 4); *p += 4; }
static void
put64(unsigned char **p, uint64_t v) { memcpy(*p, &v, 8); *p += 8; }

static void
jit_close(void)
{
    if (jit_marker != NULL) {
        munmap(jit_marker, (size_t)jit_marker_size);
        jit_marker = NULL;
    }
    if (jit_fd >= 0) {
        close(jit_fd);
        jit_fd = -1;
    }
}

/* Create /tmp/jit-PID.dump, write its header and map its first page
 * executable: the PERF_RECORD_MMAP of that mapping is how perf inject finds
 * the file. */
static int
jit_open(void)
{
    char path[320];
    jit_close();
    jit_pid = getpid();
    snprintf(path, sizeof(path), "%s/jit-%ld.dump", map_dir, (long)jit_pid);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || !S_ISREG(st.st_mode) || ftruncate(fd, 0) != 0) {
        close(fd);
        errno = EPERM;  /* someone else's file: leave it alone (truncated only once known to be ours) */
        return -1;
    }
    unsigned char hdr[40], *p = hdr;
    put32(&p, 0x4A695444);      /* magic "JiTD" */
    put32(&p, 1);               /* version */
    put32(&p, sizeof(hdr));     /* total_size */
    put32(&p, 62);              /* elf_mach: EM_X86_64 */
    put32(&p, 0);               /* pad1 */
    put32(&p, (uint32_t)jit_pid);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    put64(&p, (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u);
    put64(&p, 0);               /* flags */
    if (write(fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr)) {
        close(fd);
        return -1;
    }
    jit_marker_size = sysconf(_SC_PAGESIZE);
    jit_marker = mmap(NULL, (size_t)jit_marker_size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    if (jit_marker == MAP_FAILED) {
        jit_marker = NULL;
        close(fd);
        return -1;
    }
    jit_fd = fd;
    jit_salt = ((uint64_t)jit_pid << 32) ^ mono_ns();
    return 0;
}

/* .eh_frame for one trampoline, as perf inject lays out its ELF: .text
 * (padded to 8), then .eh_frame, then .eh_frame_hdr; pointers are relative
 * to that layout. Returns the size; *cie_size gets the CIE's. */
static size_t
jit_eh_frame(unsigned char *out, size_t code_size, size_t *cie_size)
{
    unsigned char *p = out;
    static const unsigned char cie[] = {
        0, 0, 0, 0,             /* CIE id */
        1,                      /* version */
        'z', 'R', 0,            /* augmentation */
        1,                      /* code alignment */
        0x78,                   /* data alignment -8 */
        16,                     /* return address: rip */
        1, 0x1b,                /* augmentation data: FDE pointers pcrel|sdata4 */
        0x0c, 7, 8,             /* DW_CFA_def_cfa rsp+8 */
        0x90, 1,                /* DW_CFA_offset rip at cfa-8 */
    };
    static const unsigned char ops[] = {
        0,                        /* augmentation data length */
        0x41, 0x0e, 16, 0x86, 2,  /* +1 (push %rbp): cfa=rsp+16, rbp at cfa-16 */
        0x43, 0x0d, 6,            /* +3 (mov %rsp,%rbp): cfa=rbp+16 */
        0x43, 0x0c, 7, 8, 0xc6,   /* +3 (pop %rbp): cfa=rsp+8, rbp restored */
    };
    /* CIE: length, body, DW_CFA_nop up to a multiple of 8 */
    size_t len = (4 + sizeof(cie) + 7) & ~(size_t)7;
    put32(&p, (uint32_t)(len - 4));
    memcpy(p, cie, sizeof(cie));
    memset(p + sizeof(cie), 0, len - 4 - sizeof(cie));
    p = out + len;
    *cie_size = len;
    /* FDE */
    unsigned char *fde = p;
    size_t flen = (16 + sizeof(ops) + 7) & ~(size_t)7;
    put32(&p, (uint32_t)(flen - 4));                    /* length */
    put32(&p, (uint32_t)(p - out));                     /* back to the CIE */
    size_t text_pad = (code_size + 7) & ~(size_t)7;
    int32_t pc_begin = -(int32_t)(text_pad + (size_t)(p - out));   /* pcrel: to .text */
    put32(&p, (uint32_t)pc_begin);
    put32(&p, (uint32_t)code_size);                     /* pc range */
    memcpy(p, ops, sizeof(ops));
    memset(p + sizeof(ops), 0, flen - 16 - sizeof(ops));
    return (size_t)(fde + flen - out);
}

static void
jit_entry(uintptr_t start, const char *name, size_t name_len)
{
    if (jit_pid != getpid() && jit_open() != 0) {
        return;
    }
    if (jit_fd < 0) {
        return;
    }
    unsigned char rec[512], *p = rec;
    size_t cie_size;
    unsigned char eh[96];
    size_t eh_size = jit_eh_frame(eh, JIT_CODE_SIZE, &cie_size);
    size_t unwind_size = eh_size + 20;
    size_t content = 40 + unwind_size;
    size_t total = (content + 7) & ~(size_t)7;
    /* JIT_CODE_UNWINDING_INFO: applies to the next JIT_CODE_LOAD */
    put32(&p, 4);
    put32(&p, (uint32_t)total);
    put64(&p, mono_ns());
    put64(&p, unwind_size);
    put64(&p, 20);                                   /* eh_frame_hdr size */
    put64(&p, (unwind_size + 15) & ~(size_t)15);     /* mapped size */
    memcpy(p, eh, eh_size);
    p += eh_size;
    *p++ = 1;                                        /* eh_frame_hdr: version */
    *p++ = 0x1b;                                     /* eh_frame_ptr: pcrel|sdata4 */
    *p++ = 0x03;                                     /* fde_count: udata4 */
    *p++ = 0x3b;                                     /* table: datarel|sdata4 */
    put32(&p, (uint32_t)(-(int32_t)(eh_size + 4)));  /* to .eh_frame */
    put32(&p, 1);                                    /* one FDE */
    put32(&p, (uint32_t)(-(int32_t)(((JIT_CODE_SIZE + 7) & ~7) + eh_size)));  /* .text */
    put32(&p, (uint32_t)(-(int32_t)(eh_size - cie_size)));                   /* the FDE */
    while ((size_t)(p - rec) < total) {
        *p++ = 0;
    }
    write_all(jit_fd, (const char *)rec, (size_t)(p - rec));

    /* JIT_CODE_LOAD */
    if (name_len > 300) {
        name_len = 300;
    }
    p = rec;
    jit_code_id++;
    put32(&p, 0);
    put32(&p, (uint32_t)(56 + name_len + 1 + JIT_CODE_SIZE));
    put64(&p, mono_ns());
    put32(&p, (uint32_t)getpid());
    put32(&p, (uint32_t)syscall(SYS_gettid));
    put64(&p, start);               /* vma */
    put64(&p, start);               /* code address */
    put64(&p, JIT_CODE_SIZE);
    put64(&p, jit_code_id);
    memcpy(p, name, name_len);
    p += name_len;
    *p++ = 0;
    /* why not the live bytes alone: every trampoline is the same code, and
     * perf merges generated DSOs with equal build-ids (all frames would get
     * the first name); the padding after the code carries a per-entry mark */
    memcpy(p, (const void *)start, JIT_CODE_SIZE);
    uint64_t mark = jit_salt ^ (jit_code_id << 32) ^ JIT_CODE_SIZE;
    memcpy(p + JIT_CODE_SIZE - 8, &mark, 8);
    p += JIT_CODE_SIZE;
    write_all(jit_fd, (const char *)rec, (size_t)(p - rec));
}
#endif /* __x86_64__ */

/* After a fork, the child's entries go to its own map: perf-CHILDPID.map,
 * started with every entry inherited from the parent. */
static void
reopen_after_fork(void)
{
    if (map_fd >= 0) {
        close(map_fd);
    }
    map_fd = open_map(1);  /* a new process: nothing of its own is in the map yet */
    map_pid = getpid();
    if (map_fd >= 0 && lines_len) {
        write_all(map_fd, lines, lines_len);
    }
#ifdef PYPERF_JITDUMP
    if (jitdump_on && jit_open() == 0) {
        /* the child's own dump, with every inherited trampoline */
        const char *line = lines, *end = lines + lines_len;
        while (line < end) {
            const char *nl = memchr(line, '\n', (size_t)(end - line));
            if (nl == NULL) {
                break;
            }
            unsigned long start = strtoul(line, NULL, 16);
            const char *name = memmem(line, (size_t)(nl - line), " py::", 5);
            if (name != NULL && start) {
                jit_entry(start, name + 1, (size_t)(nl - (name + 1)));
            }
            line = nl + 1;
        }
    }
#endif
}

static void
map_write(uintptr_t start, size_t size, PyCodeObject *co)
{
    /* why check the pid here too: at-fork handlers registered before ours
     * (threading's) already run Python code in the child */
    if (map_pid != getpid()) {
        reopen_after_fork();
    }
    const char *name = NULL, *file = NULL;
#ifdef PYPERF_311
    name = PyUnicode_AsUTF8(co->co_qualname);
#else
    name = PyUnicode_AsUTF8(co->co_name);
#endif
    if (name == NULL) {
        PyErr_Clear();
        name = "<unknown>";
    }
    file = PyUnicode_AsUTF8(co->co_filename);
    if (file == NULL) {
        PyErr_Clear();
        file = "<unknown>";
    }
    char buf[1024];
    int n = snprintf(buf, sizeof(buf), "%lx %lx py::%s:%s\n", (unsigned long)start, (unsigned long)size, name, file);
    if (n < 0) {
        return;
    }
    if ((size_t)n >= sizeof(buf)) {  /* a huge name: keep the line, cut the text */
        n = sizeof(buf) - 1;
        buf[n - 1] = '\n';
    }
    for (int i = 0; i < n - 1; i++) {  /* one line per entry, whatever the name holds */
        if (buf[i] == '\n' || buf[i] == '\r') {
            buf[i] = ' ';
        }
    }
    if (lines_len + (size_t)n > lines_cap) {
        size_t cap = lines_cap ? lines_cap * 2 : 64 * 1024;
        while (cap < lines_len + (size_t)n) {
            cap *= 2;
        }
        char *p = realloc(lines, cap);
        if (p != NULL) {
            lines = p;
            lines_cap = cap;
        }
    }
    if (lines_len + (size_t)n <= lines_cap) {
        memcpy(lines + lines_len, buf, (size_t)n);
        lines_len += (size_t)n;
    }
    if (map_fd >= 0) {
        /* one write(2) per line with O_APPEND: the file holds whole lines
         * even if the process dies, and perf reads it after the run */
        write_all(map_fd, buf, (size_t)n);
    }
#ifdef PYPERF_JITDUMP
    if (jitdump_on) {
        const char *name = strstr(buf, " py::");
        if (name != NULL) {
            jit_entry(start, name + 1, (size_t)(buf + n - 1 - (name + 1)));
        }
    }
#endif
}


static trampoline_t
trampoline_for(PyCodeObject *co)
{
    void *extra = NULL;
    if (_PyCode_GetExtra((PyObject *)co, extra_index, &extra) == 0 && extra != NULL) {
        return (trampoline_t)extra;
    }
    if (arena_next == NULL || arena_next + slot_size > arena_end) {
        if (new_arena() != 0) {
            return NULL;
        }
    }
    char *t = arena_next;
    if (_PyCode_SetExtra((PyObject *)co, extra_index, t) != 0) {
        PyErr_Clear();
        return NULL;
    }
    arena_next += slot_size;
    n_trampolines++;
    map_write((uintptr_t)t, sizeof(tramp_code), co);
    return (trampoline_t)t;
}

#ifdef PYPERF_311
/* codeobject.c's _PyCodeObjectExtra (not in 3.11's headers; its layout is that of
 * every release since 3.6): what co_extra points to */
typedef struct { Py_ssize_t ce_size; void *ce_extras[1]; } pyperf_code_extra;
#endif

static PyObject *
evaluator(PyThreadState *ts, eval_frame_t *frame, int throw)
{
#ifdef PYPERF_311
    /* why inline: every Python call comes through here; reading the slot
     * directly instead of calling _PyCode_GetExtra is ~40% of the cost the
     * trampolines add to the hook itself (a call-heavy loop: 0.527 -> 0.510 s,
     * no hook 0.374, the hook alone 0.488) */
    pyperf_code_extra *ce = (pyperf_code_extra *)FRAME_CODE(frame)->co_extra;
    if (ce != NULL && ce->ce_size > extra_index && ce->ce_extras[extra_index] != NULL) {
        return ((trampoline_t)ce->ce_extras[extra_index])(ts, frame, throw, _PyEval_EvalFrameDefault);
    }
#endif
    trampoline_t f = trampoline_for(FRAME_CODE(frame));
    if (f == NULL) {
        return _PyEval_EvalFrameDefault(ts, frame, throw);
    }
    return f(ts, frame, throw, _PyEval_EvalFrameDefault);
}

#endif /* PYPERF_SUPPORTED */

#if defined(PYPERF_SUPPORTED) && !defined(PYPERF_NO_TRAMPOLINE)
static PyObject *pyperf_after_fork_child(PyObject *self, PyObject *unused);
static PyMethodDef fork_def = {"after_fork_child", pyperf_after_fork_child, METH_NOARGS, NULL};

/* why os.register_at_fork and not pthread_atfork: it runs for os.fork() only,
 * not for the fork of subprocess (which execs another program at once and
 * must not get a map of code it no longer has) */
static int
register_fork_handler(PyObject *self)
{
    PyObject *os = PyImport_ImportModule("os");
    if (os == NULL) {
        return -1;
    }
    PyObject *reg = PyObject_GetAttrString(os, "register_at_fork");
    Py_DECREF(os);
    if (reg == NULL) {
        return -1;
    }
    PyObject *fn = PyCFunction_New(&fork_def, self);
    PyObject *args = PyTuple_New(0);
    PyObject *kw = Py_BuildValue("{s:O}", "after_in_child", fn);
    PyObject *res = (fn && args && kw) ? PyObject_Call(reg, args, kw) : NULL;
    Py_XDECREF(fn);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    Py_DECREF(reg);
    if (res == NULL) {
        return -1;
    }
    Py_DECREF(res);
    return 0;
}
#endif

PyDoc_STRVAR(activate_doc,
"activate(map_dir='/tmp', truncate=False) -> bool\n\n"
"Evaluate every Python function of this interpreter through a trampoline of\n"
"its own and name the trampolines in MAP_DIR/perf-PID.map (py::QUALNAME:FILE).\n"
"truncate=True empties an existing map first (at start-up: one left by an\n"
"earlier process with the same pid). jitdump=True also writes\n"
"MAP_DIR/jit-PID.dump (x86-64) for `perf inject --jit` (record with -k 1):\n"
"perf then unwinds through the trampolines with their CFI.\n"
"False when this interpreter or machine cannot (CPython >= 3.12 has\n"
"sys.activate_stack_trampoline instead) or another frame evaluator is set.");

static PyObject *
pyperf_activate(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"map_dir", "truncate", "jitdump", NULL};
    const char *dir = "/tmp";
    int truncate = 0, jitdump = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|spp:activate", kwlist, &dir, &truncate, &jitdump)) {
        return NULL;
    }
#if defined(PYPERF_SUPPORTED) && !defined(PYPERF_NO_TRAMPOLINE)
    if (active) {
        Py_RETURN_TRUE;
    }
    PyInterpreterState *interp = PyThreadState_Get()->interp;
    if (_PyInterpreterState_GetEvalFrameFunc(interp) != _PyEval_EvalFrameDefault) {
        Py_RETURN_FALSE;  /* a debugger or another profiler owns the hook */
    }
    if (strlen(dir) >= sizeof(map_dir)) {
        PyErr_SetString(PyExc_ValueError, "map_dir is too long");
        return NULL;
    }
    strcpy(map_dir, dir);
    if (extra_index < 0) {
        extra_index = _PyEval_RequestCodeExtraIndex(NULL);
        if (extra_index < 0) {
            PyErr_Clear();
            Py_RETURN_FALSE;
        }
    }
    map_fd = open_map(truncate);
    if (map_fd < 0) {
        char path[320];
        snprintf(path, sizeof(path), "%s/perf-%ld.map", map_dir, (long)getpid());
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    }
    map_pid = getpid();
#ifdef PYPERF_JITDUMP
    if (jitdump) {
        if (jit_open() != 0) {
            int err = errno;
            close(map_fd);
            map_fd = -1;
            errno = err;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        jitdump_on = 1;
        slot_size = SLOT_JIT;
    }
#endif
    if (register_fork_handler(self) != 0) {
        close(map_fd);
        map_fd = -1;
        return NULL;
    }
    _PyInterpreterState_SetEvalFrameFunc(interp, evaluator);
    active = 1;
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

PyDoc_STRVAR(after_fork_child_doc,
"after_fork_child()\n\n"
"In a forked child: start this process's own perf-PID.map with every\n"
"trampoline inherited from the parent (registered with os.register_at_fork).");

static PyObject *
pyperf_after_fork_child(PyObject *self, PyObject *unused)
{
#ifdef PYPERF_SUPPORTED
    if (active && map_pid != getpid()) {
        reopen_after_fork();
    }
#endif
    Py_RETURN_NONE;
}

PyDoc_STRVAR(stats_doc,
"stats() -> dict\n\n"
"active, trampolines (one per code object run), map_path, write_errors.");

static PyObject *
pyperf_stats(PyObject *self, PyObject *unused)
{
    char path[320] = "";
    int is_active = 0;
    unsigned long n = 0;
    int errs = 0;
#ifdef PYPERF_SUPPORTED
    is_active = active;
    n = n_trampolines;
    errs = write_errors;
    if (active) {
        snprintf(path, sizeof(path), "%s/perf-%ld.map", map_dir, (long)getpid());
    }
#endif
    int jd = 0;
#ifdef PYPERF_JITDUMP
    jd = jitdump_on;
#endif
    return Py_BuildValue("{s:O,s:k,s:s,s:i,s:O}", "active", is_active ? Py_True : Py_False,
                         "trampolines", n, "map_path", path, "write_errors", errs, "jitdump", jd ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"activate", (PyCFunction)(void (*)(void))pyperf_activate, METH_VARARGS | METH_KEYWORDS, activate_doc},
    {"after_fork_child", pyperf_after_fork_child, METH_NOARGS, after_fork_child_doc},
    {"stats", pyperf_stats, METH_NOARGS, stats_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pyperf",
    "Python function names for perf through per-function trampolines (CPython <= 3.11).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__pyperf(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
#if defined(PYPERF_SUPPORTED) && !defined(PYPERF_NO_TRAMPOLINE)
    if (PyModule_AddIntConstant(m, "SUPPORTED", 1) < 0) {
#else
    if (PyModule_AddIntConstant(m, "SUPPORTED", 0) < 0) {
#endif
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
