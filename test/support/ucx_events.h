/*
 * For the tests that put UCX's libucm and our hooks in one process: a UCX
 * UCM_EVENT_VM_UNMAPPED handler and a release callback of ours, both
 * counting the events that touch one watched range, and loading libucm
 * at run time (dlopen: the tests choose when UCX arrives).
 * volatile: the callbacks run inside munmap & co., which glibc declares
 * "leaf".
 */
#ifndef OPAL_TEST_UCX_EVENTS_H
#define OPAL_TEST_UCX_EVENTS_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucm/api/ucm.h>

static uintptr_t watch_start, watch_end;
static volatile int ucx_hits, our_hits;
static volatile uintptr_t ucx_first_start, ucx_first_len; /* the first range UCX reported */

static bool overlaps(uintptr_t start, size_t len)
{
    return start < watch_end && start + len > watch_start;
}

static void ucx_handler(ucm_event_type_t type, ucm_event_t *event, void *arg)
{
    (void) arg;
    const uintptr_t start = (uintptr_t) event->vm_unmapped.address;
    if (UCM_EVENT_VM_UNMAPPED == type && overlaps(start, event->vm_unmapped.size)) {
        if (0 == ucx_hits++) {
            ucx_first_start = start;
            ucx_first_len = event->vm_unmapped.size;
        }
    }
}

static void our_callback(void *buf, size_t length, void *cbdata, bool from_alloc)
{
    (void) cbdata, (void) from_alloc;
    if (overlaps((uintptr_t) buf, length)) {
        our_hits++;
    }
}

typedef ucs_status_t (*set_handler_fn_t)(int, int, ucm_event_callback_t, void *);
typedef void (*unset_handler_fn_t)(int, ucm_event_callback_t, void *);

static set_handler_fn_t set_handler;
static unset_handler_fn_t unset_handler;
static const ucm_global_config_t *ucm_opts;

/* Load libucs (whose constructor configures libucm) and libucm; false (dlerror says why) if not. */
static bool load_ucx(void)
{
    if (NULL == dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL)) {
        return false;
    }
    void *ucm = dlopen("libucm.so.0", RTLD_NOW | RTLD_GLOBAL);
    set_handler = ucm ? (set_handler_fn_t) dlsym(ucm, "ucm_set_event_handler") : NULL;
    unset_handler = ucm ? (unset_handler_fn_t) dlsym(ucm, "ucm_unset_event_handler") : NULL;
    ucm_opts = ucm ? (const ucm_global_config_t *) dlsym(ucm, "ucm_global_opts") : NULL;
    return NULL != set_handler && NULL != unset_handler && NULL != ucm_opts;
}

static void *map_pages(size_t n)
{
    void *p = mmap(NULL, n * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == p) {
        perror("mmap");
        exit(1);
    }
    memset(p, 1, n * 4096);
    return p;
}

static void watch(const void *p, size_t len)
{
    watch_start = (uintptr_t) p;
    watch_end = (uintptr_t) p + len;
    ucx_hits = our_hits = 0;
    ucx_first_start = ucx_first_len = 0;
}

#endif
