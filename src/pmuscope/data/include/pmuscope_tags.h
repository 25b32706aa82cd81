/* pmuscope_tags.h: software signals ("tags") a native program writes and
 * `pmuscope observe --tags` reads with every counter sample.
 *
 * Single header, no library: every function is `static inline`.
 *
 *     #include "pmuscope_tags.h"
 *     int phase = pmuscope_tag_id("phase");     // register once (or look up)
 *     pmuscope_tag_set(phase, 2);               // one aligned 8-byte store
 *     pmuscope_tag_setf(pmuscope_tag_id("load"), 0.75);
 *
 * The channel is /dev/shm/pmuscope-tags-<pid>, or $PMUSCOPE_TAGS_FILE when set
 * (as `observe --tags -- CMD` does). Layout: pmuscope/tags.py (LAYOUT).
 * Registration is serialized by a spin lock in the header; setting a value
 * is lock-free. Returns -1 on error (errno set).
 */
#ifndef PMUSCOPE_TAGS_H
#define PMUSCOPE_TAGS_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PMUSCOPE_TAGS_MAGIC "PMUTAGS"
#define PMUSCOPE_TAGS_VERSION 1u
#define PMUSCOPE_TAGS_NSLOTS 64
#define PMUSCOPE_TAGS_NAME_SIZE 48
#define PMUSCOPE_TAGS_SIZE 4096

struct pmuscope_tags_page {
    char magic[8];                  /* 0 */
    uint32_t version;               /* 8 */
    uint32_t nslots;                /* 12 */
    uint32_t pid;                   /* 16 */
    uint32_t name_size;             /* 20 */
    uint32_t lock;                  /* 24 */
    uint32_t reserved[7];           /* 28 */
    uint64_t count;                 /* 56 */
    union { int64_t i; double f; } values[PMUSCOPE_TAGS_NSLOTS];   /* 64 */
    uint8_t types[PMUSCOPE_TAGS_NSLOTS];                           /* 576 */
    char names[PMUSCOPE_TAGS_NSLOTS][PMUSCOPE_TAGS_NAME_SIZE];     /* 640 */
};

_Static_assert(sizeof(struct pmuscope_tags_page) <= PMUSCOPE_TAGS_SIZE, "tag page fits 4 KiB");

static struct pmuscope_tags_page *pmuscope_tags_page_;
static char pmuscope_tags_path_[256];
static int pmuscope_tags_owned_;

/* Open (create if needed) this process's channel. 0 on success. */
static inline int pmuscope_tags_open(void) {
    if (pmuscope_tags_page_) return 0;
    const char *env = getenv("PMUSCOPE_TAGS_FILE");
    if (env && *env) {
        snprintf(pmuscope_tags_path_, sizeof pmuscope_tags_path_, "%s", env);
    } else {
        snprintf(pmuscope_tags_path_, sizeof pmuscope_tags_path_, "/dev/shm/pmuscope-tags-%d", (int)getpid());
        pmuscope_tags_owned_ = 1;
    }
    int fd = open(pmuscope_tags_path_, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    if (ftruncate(fd, PMUSCOPE_TAGS_SIZE) < 0) { close(fd); return -1; }
    void *p = mmap(NULL, PMUSCOPE_TAGS_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return -1;
    struct pmuscope_tags_page *pg = (struct pmuscope_tags_page *)p;
    if (memcmp(pg->magic, PMUSCOPE_TAGS_MAGIC, 8) != 0) {  /* fresh file: fill the header */
        pg->version = PMUSCOPE_TAGS_VERSION;
        pg->nslots = PMUSCOPE_TAGS_NSLOTS;
        pg->pid = (uint32_t)getpid();
        pg->name_size = PMUSCOPE_TAGS_NAME_SIZE;
        __atomic_thread_fence(__ATOMIC_RELEASE);
        memcpy(pg->magic, PMUSCOPE_TAGS_MAGIC "\0", 8);
    }
    pmuscope_tags_page_ = pg;
    return 0;
}

/* The slot of tag `name` (registered on first use as an int64 tag, or as a
 * float64 tag when `is_float`); -1 on error. */
static inline int pmuscope_tag_id_typed(const char *name, int is_float) {
    size_t len = strlen(name);
    if (len == 0 || len >= PMUSCOPE_TAGS_NAME_SIZE) { errno = EINVAL; return -1; }
    if (pmuscope_tags_open() < 0) return -1;
    struct pmuscope_tags_page *pg = pmuscope_tags_page_;
    while (__atomic_exchange_n(&pg->lock, 1u, __ATOMIC_ACQUIRE)) { }
    uint64_t n = pg->count, i;
    for (i = 0; i < n; i++)
        if (strncmp(pg->names[i], name, PMUSCOPE_TAGS_NAME_SIZE) == 0) break;
    if (i == n) {
        if (n >= PMUSCOPE_TAGS_NSLOTS) { __atomic_store_n(&pg->lock, 0u, __ATOMIC_RELEASE); errno = ENOSPC; return -1; }
        memset(pg->names[i], 0, PMUSCOPE_TAGS_NAME_SIZE);
        memcpy(pg->names[i], name, len);
        pg->types[i] = is_float ? 1 : 0;
        __atomic_store_n(&pg->count, n + 1, __ATOMIC_RELEASE);  /* publish last */
    }
    __atomic_store_n(&pg->lock, 0u, __ATOMIC_RELEASE);
    return (int)i;
}

static inline int pmuscope_tag_id(const char *name) { return pmuscope_tag_id_typed(name, 0); }

static inline void pmuscope_tag_set(int id, int64_t value) {
    __atomic_store_n(&pmuscope_tags_page_->values[id].i, value, __ATOMIC_RELAXED);
}

static inline void pmuscope_tag_setf(int id, double value) {
    int64_t bits;
    memcpy(&bits, &value, sizeof bits);
    __atomic_store_n(&pmuscope_tags_page_->values[id].i, bits, __ATOMIC_RELAXED);
}

/* Unmap; remove the file when this process created it. */
static inline void pmuscope_tags_close(void) {
    if (!pmuscope_tags_page_) return;
    munmap(pmuscope_tags_page_, PMUSCOPE_TAGS_SIZE);
    pmuscope_tags_page_ = NULL;
    if (pmuscope_tags_owned_) unlink(pmuscope_tags_path_);
}

#endif /* PMUSCOPE_TAGS_H */
