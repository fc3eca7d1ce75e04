/*
 * A mock device for rcache tests: register_mem/deregister_mem that count,
 * check pairing, can run out of resources, and catch a deregistration made
 * while the test pretends to be inside the allocator (or by another
 * process: after fork).
 */
#ifndef OPAL_TEST_RCACHE_MOCK_H
#define OPAL_TEST_RCACHE_MOCK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/rcache/base/base.h"
#include "test/support/test_util.h"

typedef struct mock_reg_t {
    mca_rcache_base_registration_t base;
    uint64_t magic;          /* set by register_mem, cleared by deregister_mem */
    uint64_t registered_at;  /* mock_clock when register_mem ran */
    int owner_pid;
} mock_reg_t;

#define MOCK_MAGIC 0x5245474953544552ull

typedef struct mock_dev_t {
    volatile long registered, deregistered, bad_dereg, dereg_in_alloc;
    long capacity;        /* >0: at most this many live registrations, else OUT_OF_RESOURCE */
    int dereg_frees;      /* deregister_mem frees a large block (may trigger munmap) */
    int refuse;           /* register_mem fails with an error other than running out */
} mock_dev_t;

static volatile uint64_t mock_clock;
static __thread int mock_in_alloc; /* the test is "inside the allocator" */

static int mock_register(void *data, void *base, size_t size, mca_rcache_base_registration_t *reg)
{
    mock_dev_t *dev = data;
    mock_reg_t *r = (mock_reg_t *) reg;
    if (dev->refuse) {
        return OPAL_ERROR;
    }
    if (dev->capacity > 0
        && __atomic_load_n(&dev->registered, __ATOMIC_SEQ_CST)
                   - __atomic_load_n(&dev->deregistered, __ATOMIC_SEQ_CST)
               >= dev->capacity) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    r->registered_at = __atomic_load_n(&mock_clock, __ATOMIC_SEQ_CST);
    r->magic = MOCK_MAGIC;
    r->owner_pid = (int) getpid();
    __atomic_add_fetch(&dev->registered, 1, __ATOMIC_SEQ_CST);
    return OPAL_SUCCESS;
}

static int mock_deregister(void *data, mca_rcache_base_registration_t *reg)
{
    mock_dev_t *dev = data;
    mock_reg_t *r = (mock_reg_t *) reg;
    if (mock_in_alloc) {
        __atomic_add_fetch(&dev->dereg_in_alloc, 1, __ATOMIC_SEQ_CST);
    }
    if (MOCK_MAGIC != r->magic || r->owner_pid != (int) getpid()) {
        __atomic_add_fetch(&dev->bad_dereg, 1, __ATOMIC_SEQ_CST);
    }
    r->magic = 0;
    if (dev->dereg_frees) {
        free(malloc(300000)); /* large enough for glibc to mmap and munmap it */
    }
    __atomic_add_fetch(&dev->deregistered, 1, __ATOMIC_SEQ_CST);
    return OPAL_SUCCESS;
}

static inline void mock_resources(mock_dev_t *dev, mca_rcache_base_resources_t *res)
{
    res->cache_name = "mock";
    res->reg_data = dev;
    res->sizeof_reg = sizeof(mock_reg_t);
    res->register_mem = mock_register;
    res->deregister_mem = mock_deregister;
}

/* A fresh device and a grdma module on it; the test exits if it cannot be made. */
static inline mca_rcache_base_module_t *mock_grdma(mock_dev_t *dev)
{
    mca_rcache_base_resources_t res; /* the module keeps a copy */
    memset(dev, 0, sizeof(*dev));
    mock_resources(dev, &res);
    mca_rcache_base_module_t *m = mca_rcache_base_module_create("grdma", NULL, &res);
    if (NULL == m) {
        fprintf(stderr, "cannot create a grdma module\n");
        exit(1);
    }
    return m;
}

/* mock_grdma, and count pages of address space to register (reserved, never touched). */
static inline mca_rcache_base_module_t *mock_grdma_and_pages(mock_dev_t *dev, size_t count,
                                                             unsigned char **pages)
{
    *pages = mmap(NULL, count * (size_t) sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (MAP_FAILED == *pages) {
        fprintf(stderr, "cannot reserve %zu pages\n", count);
        exit(1);
    }
    return mock_grdma(dev);
}

/* Destroy m: every register_mem was matched by one good deregister_mem. */
static inline void mock_destroy_and_check(mca_rcache_base_module_t *m, mock_dev_t *dev, const char *what)
{
    CHECK(OPAL_SUCCESS == mca_rcache_base_module_destroy(m));
    CHECK_MSG(dev->registered == dev->deregistered, "%s: %ld registered, %ld deregistered", what,
              dev->registered, dev->deregistered);
    CHECK_MSG(0 == dev->bad_dereg && 0 == dev->dereg_in_alloc, "%s: bad %ld, in alloc %ld", what,
              dev->bad_dereg, dev->dereg_in_alloc);
}

#endif
